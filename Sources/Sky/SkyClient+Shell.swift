import Logging
import SkyProtocol
import SkyWire
import SkyZMQ
import Synchronization

extension SkyClient {
    /// Runs the ``ClientStateMachine`` inline on the client's I/O thread and carries out its
    /// actions: messages, sockets, and the callers' continuations, resumed from that thread.
    ///
    /// A call takes a slot and parks its continuation in it (``WaiterSlots``: two short holds of
    /// a lock, no hashing) plus one post to the thread (one mailbox append, and a wake-up
    /// shared by every call posted before the thread woke); its reply resumes the caller from
    /// the I/O thread, so it wakes one thread, the caller's. Timers are
    /// the loop's alarm (its poll's timeout), not tasks: on a clock other than
    /// `ContinuousClock` (a test's manual clock) a task sleeps on that clock instead.
    final class Shell: Sendable {
        typealias WaiterID = ClientStateMachine.WaiterID

        /// What callers post to the I/O thread.
        enum Input: Sendable {
            /// A call; `mayHaveLeft`: its caller may have gone before the thread takes it (an
            /// `async` caller's task cancelled between posting it and the thread taking it),
            /// so the thread looks first. A completion caller cancels through its handle, which
            /// it gets once the start is posted: its abandonment always comes after the start.
            case start(RequestTable.Call, WaiterID, mayHaveLeft: Bool)
            case abandon(WaiterID)
            case waitForConnection(WaiterID)
            case stopWaitingForConnection(WaiterID)
            case waitForFeatures(WaiterID, by: Duration?)
            case stopWaitingForFeatures(WaiterID)
            /// A timer on a clock other than `ContinuousClock` fired.
            case timer
            case close
        }

        /// The loop input that says ``inputs`` holds something.
        struct InputsPosted: Sendable {}

        /// A subscription to the broker's events, fed from the I/O thread.
        struct EventSink: Sendable {
            let continuation: AsyncStream<SkyEvent>.Continuation
            /// Set when the broker refused this client's key for events.
            var refusal: String?
            /// Its socket completed a handshake.
            var handshook = false
            /// Its connection closed before a handshake: the subscription ended, to be made anew.
            var closedBeforeHandshake = false
        }

        /// What an events subscription learns from libzmq's monitor.
        static let eventMonitor: ZMQMonitorEvent.Kind.Set = [.handshakeSucceeded, .disconnected, .handshakeFailed]

        let machine: Locked<ClientStateMachine>
        /// With room for as many calls as the request table (see ``RequestTable/room``).
        let calls = Locked(WaiterSlots<CallWaiter>(room: RequestTable.room))
        let connectionWaiters = Locked<[WaiterID: CheckedContinuation<Void, any Error>]>([:])
        let featureWaiters = Locked<[WaiterID: CheckedContinuation<BrokerFeatures?, Never>]>([:])
        /// What the last broker that answered `mmi.features` said: how a submit is encoded,
        /// without a trip to the I/O thread per job.
        let lastFeatures = Locked<BrokerFeatures?>(nil)
        let eventSinks = Locked<[ZMQEventLoop.SocketID: EventSink]>([:])
        /// Each wake-up's actions, in one buffer kept from wake-up to wake-up.
        let spareActions = SpareBuffer<ClientStateMachine.Action>()
        /// Inputs for the I/O thread, behind one ``InputsPosted`` marker in the loop's mailbox.
        let inputs = Locked(InputQueue<Input>())
        /// The buffer ``inputs`` is traded for, kept from wake-up to wake-up.
        let spareInputs = SpareBuffer<Input>()
        /// What the I/O thread posts to itself while it runs ``handle(_:into:)``.
        let onThread = ThreadConfined(OnThread(), name: "the client's I/O thread's own posts")
        /// The I/O thread's loop, set once when it started: read on every call without a lock.
        let loop = LoopReference()
        /// The loop the handler runs on, set before its first broker socket opens. The handler's
        /// own actions (open the next broker socket, close one) need it from that socket's first
        /// event, while ``loop`` is stored for callers only once the start succeeded: a socket
        /// on the broker's events port fails its handshake within a millisecond, and its
        /// "open another socket" was dropped when it came first (the client then waited
        /// `connectTimeout` for a connection libzmq never retries).
        let handlerLoop = Locked<ZMQEventLoop?>(nil)
        let time: TimeSource
        let logger: Logger
        let configuration: Configuration
        let identity: [UInt8]
        let endpoints: [String]
        private let nextWaiter = Atomic<UInt64>(0)
        private let nextCallKey = Atomic<UInt64>(0)
        /// The timer task and its deadline, on a clock other than `ContinuousClock`.
        private let sleeper = Locked<(deadline: Duration, task: Task<Void, Never>)?>(nil)

        init(machine: ClientStateMachine, time: TimeSource, configuration: Configuration, identity: [UInt8]) {
            endpoints = machine.endpoints
            self.machine = Locked(machine)
            self.time = time
            self.configuration = configuration
            logger = configuration.logger
            self.identity = identity
        }

        /// The idempotency key of a submit that names none, so that the submit resent after a
        /// lost answer (a broker restart) is one job: this client's random identity and a
        /// counter. Increasing within a client, so the journal's key index grows at one end
        /// (a random key per job, a UUID, touched a different index page for every job).
        func callKey() -> String {
            let number = nextCallKey.wrappingAdd(1, ordering: .relaxed).newValue
            let counter = String(number, radix: 16)
            return "call:" + Hex.encode(identity) + "-" + String(repeating: "0", count: 16 - counter.count) + counter
        }

        /// The DEALER to broker socket number `number`, watched for connections made and lost.
        func brokerSocket(_ number: Int, endpoint: String) -> ZMQEventLoop.SocketSpec {
            // No high-water mark: the request table bounds what is in flight. ZMTP heartbeats notice
            // a broker host that vanished without closing the connection.
            .brokerDealer(
                id: Self.socketID(number), endpoint: endpoint, highWaterMark: 0, credentials: configuration.credentials,
                options: [
                    .routingID(identity), .heartbeatInterval(milliseconds: 1000), .heartbeatTimeout(milliseconds: 3000),
                ],
                monitor: [.handshakeSucceeded, .disconnected, .handshakeFailed, .connected, .connectRetried])
        }

        /// Broker sockets are numbered from 0; event subscriptions from here on.
        static let firstEventSocket = 1_000_000

        static func socketID(_ number: Int) -> ZMQEventLoop.SocketID {
            ZMQEventLoop.SocketID(number, numbered: number < firstEventSocket ? "broker" : "events")
        }

        // MARK: Callers

        /// Runs one call remotely: returns its completion; throws `CancellationError` when the
        /// calling task is cancelled (the call is then abandoned at the broker).
        nonisolated(nonsending) func call(_ call: RequestTable.Call) async throws -> Completion {
            let waiter = calls.withLock { $0.reserve() }
            return try await withTaskCancellationHandler {
                try await withUnsafeThrowingContinuation {
                    (continuation: UnsafeContinuation<Completion, any Error>) in
                    guard calls.withLock({ $0.fill(waiter, with: .suspended(continuation)) }) else {
                        // The handler below, or the close, freed the slot before it was filled.
                        if Task.isCancelled {
                            continuation.resume(throwing: CancellationError())
                        } else {
                            continuation.resume(returning: Completion(result: .failure(.clientClosed), attempts: 0))
                        }
                        return
                    }
                    if Task.isCancelled {
                        // Cancelled before the handler below could find the continuation.
                        calls.withLock { $0.remove(waiter) }?.cancel()
                    } else if !post(.start(call, waiter, mayHaveLeft: true)) {
                        calls.withLock { $0.remove(waiter) }?.complete(
                            Completion(result: .failure(.clientClosed), attempts: 0))
                    }
                }
            } onCancel: {
                // Whoever takes the continuation resumes it: this handler, or the I/O thread
                // with the call's outcome. The machine ignores a start whose caller has gone.
                guard let waiting = calls.withLock({ $0.remove(waiter) }) else { return }
                waiting.cancel()
                post(.abandon(waiter))
            }
        }

        /// Starts one call whose outcome goes to `handler`, run on the I/O thread (or by the
        /// close, for a call it ends; on a task, for a call made after it).
        /// - Returns: its waiter, to cancel it by; nil when the client had closed.
        func call(_ call: consuming RequestTable.Call, waiter handler: consuming CallWaiter) -> WaiterID? {
            // Both moved on, not copied: into the lock's closure through an optional, as in
            // ``post(_:)``.
            var moving = Optional(consume handler)
            let waiter = calls.withLock { $0.insert(moving.take()!) }
            guard post(.start(consume call, waiter, mayHaveLeft: false)) else {
                if let waiting = calls.withLock({ $0.remove(waiter) }) {
                    // Not on the caller's stack: a completion that retries at once would recurse.
                    Task { waiting.complete(Completion(result: .failure(.clientClosed), attempts: 0)) }
                }
                return nil
            }
            return waiter
        }

        /// Ends the call of `waiter` if its completion has not been taken yet: the completion
        /// gets `cancelled` (on a task: never inside the caller's `cancel()`), and the machine
        /// abandons the call as it does a cancelled `async` caller's.
        func cancel(_ waiter: WaiterID) {
            guard let waiting = calls.withLock({ $0.remove(waiter) }) else { return }
            Task { waiting.complete(Completion(result: .failure(CallHandle.cancelledError), attempts: 0)) }
            post(.abandon(waiter))
        }

        /// Returns once a connection to the broker is up; throws `CancellationError` if cancelled,
        /// the refusal if the broker refused this client, ``SkyError/clientClosed`` once closed.
        func waitForConnection() async throws {
            let waiter = nextWaiter.add(1, ordering: .relaxed).newValue
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    connectionWaiters.withLock { $0[waiter] = continuation }
                    if Task.isCancelled {
                        connectionWaiters.withLock { $0.removeValue(forKey: waiter) }?.resume(
                            throwing: CancellationError())
                    } else if !post(.waitForConnection(waiter)) {
                        connectionWaiters.withLock { $0.removeValue(forKey: waiter) }?.resume(
                            throwing: SkyError.clientClosed)
                    }
                }
            } onCancel: {
                guard let continuation = connectionWaiters.withLock({ $0.removeValue(forKey: waiter) }) else { return }
                continuation.resume(throwing: CancellationError())
                post(.stopWaitingForConnection(waiter))
            }
        }

        /// What the broker of this connection says of itself (`mmi.features`, which the client's
        /// machine asks once a connection is up); `nil` when nothing is known within
        /// `connectTimeout`, or the caller was cancelled.
        func brokerFeatures(by deadline: Duration?) async -> BrokerFeatures? {
            let waiter = nextWaiter.add(1, ordering: .relaxed).newValue
            return await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<BrokerFeatures?, Never>) in
                    featureWaiters.withLock { $0[waiter] = continuation }
                    if Task.isCancelled || !post(.waitForFeatures(waiter, by: deadline)) {
                        featureWaiters.withLock { $0.removeValue(forKey: waiter) }?.resume(returning: nil)
                    }
                }
            } onCancel: {
                guard let continuation = featureWaiters.withLock({ $0.removeValue(forKey: waiter) }) else { return }
                continuation.resume(returning: nil)
                post(.stopWaitingForFeatures(waiter))
            }
        }

        /// Hands `input` to the I/O thread; `false` once the loop has stopped.
        @discardableResult
        func post(_ input: consuming Input) -> Bool {
            guard let loop = loop.load() else { return false }
            // Moved into the queue through the lock's closure, not copied.
            var moving = Optional(consume input)
            switch inputs.withLock({ $0.append(moving.take()!) }) {
            case .refused: return false
            case .queued: return true
            case .first:
                // A call a completion starts on the I/O thread: taken before the wake-up ends.
                if loop.isOnLoopThread, onThread.withValue({ $0.markFromHandler() }) { return true }
                return postMarker(to: loop)
            }
        }

        /// Tells the loop that ``inputs`` holds something; `false` once the loop has stopped.
        private func postMarker(to loop: ZMQEventLoop) -> Bool {
            if loop.post(input: InputsPosted()) { return true }
            // The loop stopped before taking the queue, so nothing ever will: whoever waits
            // on an input in it (this one too) is told now.
            closed()
            return false
        }

        /// After the loop stopped: every caller still suspended gets `clientClosed`.
        func closed() {
            _ = inputs.withLock { $0.stop() }
            sleeper.withLock { $0?.task.cancel() }
            for waiting in calls.withLock({ $0.removeAll() }) {
                waiting.complete(Completion(result: .failure(.clientClosed), attempts: 0))
            }
            for continuation in connectionWaiters.withLock(Self.takeAll) {
                continuation.resume(throwing: SkyError.clientClosed)
            }
            for continuation in featureWaiters.withLock(Self.takeAll) { continuation.resume(returning: nil) }
            for sink in eventSinks.withLock(Self.takeAll) { sink.continuation.finish() }
        }

        private static func takeAll<Key, Value>(_ dictionary: inout [Key: Value]) -> Dictionary<Key, Value>.Values {
            defer { dictionary.removeAll() }
            return dictionary.values
        }

        // MARK: The I/O thread

        /// Everything the I/O thread read or was posted since its last wake-up.
        func handle(_ batch: inout [ZMQEventLoop.Inbound], into outbound: inout some OutboundSink) {
            onThread.withValue { $0.handling = true }
            let now = time.now()
            var actions = spareActions.take()
            var next = machine.withLock { machine in
                // Each message moved out of the batch, not copied (see `takeEach`).
                batch.takeEach(leaving: .tick) { inbound in
                    switch consume inbound {
                    case .message(let from, let message) where from.rawValue < Self.firstEventSocket:
                        machine.received(message.content, socket: from.rawValue, now: now, into: &actions)
                    case .message(let from, let message):
                        publish(message, from: from)
                    case .monitor(let from, let event) where from.rawValue < Self.firstEventSocket:
                        machine.monitor(event, socket: from.rawValue, now: now, into: &actions)
                    case .monitor(let from, let event):
                        eventsTransport(from, event)
                    case .tick:
                        machine.expire(now: now, into: &actions)
                    // The marker's type compared, not cast to (`is` ran the runtime's dynamic
                    // cast on every wake-up).
                    case .input(let marker) where type(of: marker) == InputsPosted.self:
                        takePosted(into: &machine, now: now, actions: &actions)
                    case .opened(let socket, .failure(let error)) where socket.rawValue < Self.firstEventSocket:
                        machine.openFailed(socket: socket.rawValue, error: "\(error.underlying)", into: &actions)
                    case .sendFailed, .input, .opened:
                        return
                    }
                }
                return machine.nextDeadline()
            }
            execute(&actions, into: &outbound)
            // Calls that the completions above started: into the machine and sent now, not
            // through a marker in the mailbox and another pass of the loop (a handler run
            // and a mailbox round trip a call, for a caller that calls again from its
            // completion). A few rounds at most: a call failed at once, called again from its
            // completion, would otherwise keep the thread here.
            var rounds = 0
            while onThread.withValue({ $0.takeMarked() }) {
                rounds += 1
                guard rounds <= Self.ownRounds else {
                    onThread.withValue { $0.handling = false }
                    if let loop = loop.load() { _ = postMarker(to: loop) }
                    break
                }
                // Emptied of what `execute` left in place of the actions it took.
                actions.removeAllKeepingBuffer()
                let now = time.now()
                next = machine.withLock { machine in
                    takePosted(into: &machine, now: now, actions: &actions)
                    return machine.nextDeadline()
                }
                execute(&actions, into: &outbound)
            }
            onThread.withValue { $0.handling = false }
            spareActions.giveBack(&actions)
            arm(next)
        }

        /// Rounds of its own calls a wake-up takes before it leaves the rest to the next one.
        static let ownRounds = 8

        /// The I/O thread's view of what it posts to itself while it handles a batch.
        struct OnThread {
            /// The thread is in ``handle(_:into:)``.
            var handling = false
            /// An input the thread posted there waits in ``inputs`` without a marker.
            var marked = false

            /// For ``post(_:)`` on the I/O thread, whose input was the first in the queue:
            /// whether ``handle(_:into:)`` takes it (no marker is posted then).
            mutating func markFromHandler() -> Bool {
                guard handling else { return false }
                marked = true
                return true
            }

            /// Whether inputs wait unmarked; the flag is cleared.
            mutating func takeMarked() -> Bool {
                defer { marked = false }
                return marked
            }
        }

        /// Everything in ``inputs``, traded for the thread's spare buffer (one lock), into the
        /// machine: each input moved out, its call moved on into the table (see `takeEach`).
        private func takePosted(
            into machine: inout ClientStateMachine, now: Duration, actions: inout [ClientStateMachine.Action]
        ) {
            var posted = spareInputs.take()
            inputs.withLock { $0.take(into: &posted) }
            posted.takeEach(leaving: .timer) { take($0, into: &machine, now: now, actions: &actions) }
            spareInputs.giveBack(&posted)
        }

        /// One input a caller posted. A method, not a function nested in ``handle(_:into:)``: a
        /// nested function capturing `actions` put it in a box whose every access the runtime
        /// checked for exclusivity, on every call.
        private func take(
            _ input: consuming Input, into machine: inout ClientStateMachine, now: Duration,
            actions: inout [ClientStateMachine.Action]
        ) {
            switch consume input {
            case .start(let call, let waiter, let mayHaveLeft):
                // A caller cancelled before the thread took its call has gone. Looked at only
                // when it may have (a lock round trip on every call).
                guard !mayHaveLeft || calls.withLock({ $0.contains(waiter) }) else { return }
                machine.start(call, waiter: waiter, now: now, into: &actions)
            case .abandon(let waiter): machine.abandon(waiter, into: &actions)
            case .waitForConnection(let waiter): machine.waitForConnection(waiter, into: &actions)
            case .stopWaitingForConnection(let waiter): machine.stopWaitingForConnection(waiter)
            case .waitForFeatures(let waiter, let deadline):
                machine.waitForFeatures(waiter, by: deadline, now: now, into: &actions)
            case .stopWaitingForFeatures(let waiter): machine.stopWaitingForFeatures(waiter)
            case .timer: machine.expire(now: now, into: &actions)
            case .close: machine.close(into: &actions)
            }
        }

        private func execute(_ actions: inout [ClientStateMachine.Action], into outbound: inout some OutboundSink) {
            // Each action moved out, not copied; `.close` of no socket (a plain value) is left in its place.
            actions.takeEach(leaving: .close(socket: -1)) { carryOut($0, into: &outbound) }
        }

        private func carryOut(
            _ action: consuming ClientStateMachine.Action, into outbound: inout some OutboundSink
        ) {
            switch consume action {
            case .send(let socket, .packedRequest(let request)):
                // Taken out of the action as it is destructured, not copied out of the command.
                let id = Self.socketID(socket)
                ClientToBroker.lendPackedRequest(request) { outbound.send(socket: id, parts: $0) }
            case .send(let socket, let command):
                outbound.append(ZMQEventLoop.Outbound(socket: Self.socketID(socket), message: command.frames()))
            case .succeed(let waiters, let body, let attempts):
                resume(waiters, Completion(result: .success(body), attempts: attempts))
            case .fail(let waiters, let error, let attempts):
                resume(waiters, Completion(result: .failure(error), attempts: attempts))
            case .connected(let waiters):
                resumeConnectionWaiters(waiters, with: nil)
            case .connectionFailed(let waiters, let error):
                resumeConnectionWaiters(waiters, with: error)
            case .featuresKnown(let waiters, let features):
                resumeFeatureWaiters(waiters, with: features)
            case .open(let socket, let endpoint):
                handlerLoop.withLock { $0 }?.requestOpen(brokerSocket(socket, endpoint: endpoints[endpoint]))
            case .close(let socket):
                // `-1` is what `execute` leaves in place of an action it took: never carried out.
                assert(socket >= 0, "an action list carried out twice")
                handlerLoop.withLock { $0 }?.close(Self.socketID(socket))
            case .log(let level, let message, let metadata):
                logger.log(level: level, "\(message)", metadata: metadata)
            }
        }

        /// The completion is consumed: the one waiter takes it without a copy (a copy of its
        /// `Result` went through the runtime's generic tuple witness).
        private func resume(_ waiters: WaiterList, _ completion: consuming Completion) {
            if let waiter = waiters.only {
                calls.withLock { $0.remove(waiter) }?.complete(completion)
                return
            }
            let taken = calls.withLock { calls in waiters.compactMap { calls.remove($0) } }
            let shared = copy completion
            for waiting in taken { waiting.complete(shared) }
        }

        // The continuations are resumed apart, in functions not inlined: their types' layouts
        // are read from metadata, and while they were handled in ``carryOut(_:into:)`` every
        // call of it (two a call the client makes) looked that metadata up and reserved stack.

        /// Callers waiting for a connection: resumed, or thrown `error`.
        @inline(never)
        private func resumeConnectionWaiters(_ waiters: [WaiterID], with error: SkyError?) {
            let taken = connectionWaiters.withLock { all in waiters.compactMap { all.removeValue(forKey: $0) } }
            for continuation in taken {
                if let error { continuation.resume(throwing: error) } else { continuation.resume() }
            }
        }

        @inline(never)
        private func resumeFeatureWaiters(_ waiters: [WaiterID], with features: BrokerFeatures?) {
            if let features { lastFeatures.withLock { $0 = features } }
            let taken = featureWaiters.withLock { all in waiters.compactMap { all.removeValue(forKey: $0) } }
            for continuation in taken { continuation.resume(returning: features) }
        }

        private func publish(_ message: ZMQMessage, from socket: ZMQEventLoop.SocketID) {
            guard let sink = eventSinks.withLock({ $0[socket] }), let event = try? SkyEvent.decode(message.frames)
            else { return }
            sink.continuation.yield(event)
        }

        /// What libzmq's monitor saw on an events subscription: a key the broker does not admit
        /// as a watcher's ends it with the refusal; a connection closed before its handshake
        /// ends it to be made anew (see ``SkyClient/events()``).
        private func eventsTransport(_ socket: ZMQEventLoop.SocketID, _ event: ZMQMonitorEvent) {
            let ended = eventSinks.withLock { sinks -> EventSink? in
                guard var sink = sinks[socket] else { return nil }
                defer { sinks[socket] = sink }
                switch event.kind {
                case .handshakeSucceeded:
                    sink.handshook = true
                    return nil
                case .handshakeFailedAuth:
                    sink.refusal =
                        "\(event.endpoint) refused this client's key for events (ZAP status \(event.value)): it is not on the broker's watcher allow-list (skybroker --watcher-keys)"
                    return sink
                case .disconnected where !sink.handshook:
                    sink.closedBeforeHandshake = true
                    return sink
                default:
                    return nil
                }
            }
            ended?.continuation.finish()
        }

        /// Arms the one timer at the machine's earliest deadline.
        private func arm(_ next: Duration?) {
            if let origin = time.continuousOrigin {
                // `loop`, not `handlerLoop` (no lock on every wake-up): before it is stored no
                // call can have started, and the start posts `.timer` once it is, which arms this.
                loop.load()?.setAlarm(next, after: origin)
                return
            }
            // A timer armed earlier than needed, or with nothing left to time, is left to fire
            // (into a machine with nothing due): replacing it around every call would wake a
            // timer thread twice per call.
            guard let next else { return }
            let time = time
            sleeper.withLock { sleeper in
                if let armed = sleeper, armed.deadline <= next { return }
                sleeper?.task.cancel()
                let task = Task { [weak self] in
                    guard (try? await time.sleep(next)) != nil, let self else { return }
                    self.sleeper.withLock { if $0?.deadline == next { $0 = nil } }
                    self.post(.timer)
                }
                sleeper = (next, task)
            }
        }
    }
}
