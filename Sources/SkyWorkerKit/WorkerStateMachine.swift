import Logging
import SkyProtocol
import SkyWire

/// Everything a worker decides, as a value: registration and the connection generation, the
/// broker's liveness, the drain, the tasks in flight and their cancellation. Inputs (a message,
/// a tick, a finished task, a stop request) carry `now` and return the actions the shell must
/// carry out; nothing here touches a socket, a clock or a task, so tests drive it line by line.
///
/// The shell (``SkyWorker``) runs it inline on the worker's I/O thread, as the broker runs
/// `BrokerStateMachine`: a message from the broker crosses no other thread before the
/// machine has decided, and a task's reply is one post to that thread.
package struct WorkerStateMachine: Sendable {
    package typealias Instant = MonotonicInstant

    package struct Configuration: Sendable {
        /// What READY announces; `capacity` is also the most tasks run at once.
        package var announcement: WorkerAnnouncement
        package var liveness: BrokerLiveness.Configuration
        /// How long a graceful stop waits for running tasks.
        package var drainGrace: Duration
        /// The worker connects with CURVE keys (for what a failed handshake probably means).
        package var usesCurve: Bool
        /// The worker has a tracer: it takes REQUESTs' trace frames (`TraceContext.feature`).
        package var takesTrace: Bool
        /// How many broker endpoints there are (an active broker and its standbys): a lost,
        /// refused or silent one is left for the next.
        package var endpointCount: Int

        package init(
            announcement: WorkerAnnouncement, liveness: BrokerLiveness.Configuration = .init(),
            drainGrace: Duration = .seconds(30), usesCurve: Bool = false, takesTrace: Bool = false,
            endpointCount: Int = 1
        ) {
            self.endpointCount = max(1, endpointCount)
            self.announcement = announcement
            self.liveness = liveness
            self.drainGrace = drainGrace
            self.usesCurve = usesCurve
            self.takesTrace = takesTrace
        }
    }

    /// One delivery of a task: the broker's tag plus the request id.
    package struct TaskKey: Hashable, Sendable {
        /// The delivery tag the broker gave the task.
        package var tag: DeliveryTag
        package var requestID: RequestID

        package init(tag: DeliveryTag, requestID: RequestID) {
            self.tag = tag
            self.requestID = requestID
        }

        /// The request id alone: 128 random bits spread well, and hashing the tag's bytes one
        /// by one showed in profiles.
        package func hash(into hasher: inout Hasher) { hasher.combine(requestID) }
    }

    /// How the worker ends.
    package enum Ending: Sendable, Equatable {
        /// Every task finished and was answered (or there was none).
        case drained
        /// Tasks were still running (drain grace over, or the broker forgot the worker while it
        /// drained): they are cancelled and not answered; the broker runs them elsewhere.
        case abandoned(tasks: Int)
        /// The broker refused to register the worker, for this reason: registering again would
        /// be refused the same way.
        case refused(String)
        /// The first connection could not be opened (the endpoint is wrong): retrying would
        /// fail the same way.
        case cannotConnect(String)
    }

    package enum Action: Sendable, Equatable {
        /// Open connection number `generation` to the broker, send READY on it and heartbeat on
        /// it; close the one before. Only messages from the newest connection are inputs.
        case connect(generation: Int)
        /// Send this on the current connection.
        case send(WorkerToBroker)
        /// Run the task's handler; report its reply with ``WorkerStateMachine/taskFinished(_:reply:now:into:)``.
        /// `slot` (below the capacity) is the task's alone while it runs: the shell finds the
        /// task by it, without hashing its key.
        case startTask(TaskKey, TaskRequest, slot: Int)
        /// Cancel the handler running this task: the broker asked (its reply, whatever it is,
        /// still goes back), or the task is no longer this worker's (its reply is not sent, and
        /// its slot may be given to another task before the handler returns).
        case cancelTask(TaskKey, slot: Int)
        /// Heartbeat every `interval` on the current connection from now on (the broker's).
        case heartbeatEvery(Duration)
        /// Stop: say DISCONNECT unless refused, close the connection, and return.
        case finish(Ending)
        case log(Logger.Level, String, Logger.Metadata = [:])
    }

    /// The drain, as one state.
    package enum Phase: Sendable, Equatable {
        /// Not connected yet: ``WorkerStateMachine/start(now:into:)`` connects.
        case idle
        case serving
        /// A graceful stop: DRAINING was said, running tasks finish until `deadline`, counted
        /// from the machine's start (``origin``): a `Duration`, not an `Instant`, whose copies
        /// and comparisons go through its type's witnesses, and the phase is read on every message.
        /// `brokerDone` once the broker acknowledged it (no task comes after that) or is gone.
        case draining(deadline: Duration, brokerDone: Bool)
        /// Done; how it ended went out with ``Action/finish(_:)``. No payload, so the phase is
        /// a plain value: the checks on every finished task copied an ending's strings through
        /// the enum's generic witnesses.
        case finished
    }

    package let configuration: Configuration
    /// When the machine was made: the drain's deadline counts from here.
    package let origin: Instant
    package private(set) var phase: Phase = .idle
    /// The connection messages are taken from; 0 before the first.
    package private(set) var generation = 0
    /// The broker endpoint of the current connection (of ``Configuration/endpointCount``).
    package private(set) var endpoint = 0
    /// When the current connection was asked for, and whether its handshake completed.
    private var connectionStart: Instant
    private var handshaken = false
    /// How long an endpoint of several that refuses connections is tried before the next: a
    /// standby broker binds nothing, but every endpoint refusing (all brokers down) must not
    /// become a tight loop of new sockets.
    static let refusedEndpointDwell = Duration.milliseconds(100)
    package private(set) var liveness: BrokerLiveness
    /// Tasks whose handlers run, with their slots (all came on the current connection: a new
    /// one cancels the rest).
    /// Made with room for four times the capacity (at most `runningRoomLimit`): with its
    /// buckets mostly empty, a probe or a finished task's removal seldom passes a neighbour.
    package private(set) var running: RunningTasks
    static let runningRoomLimit = 1024
    /// Slots given out before and free again, and how many were ever given out (since the
    /// last connection): a new task takes a freed one first, so slots stay as few as the tasks
    /// that ran at once, however large the capacity.
    private var freeSlots: [Int] = []
    private var slotsGiven = 0
    /// Counted drops, for logs and tests.
    package private(set) var malformedMessages = 0
    /// Whether a broker has answered this worker with anything but a refusal: its connection
    /// is really up (connecting alone says nothing: libzmq connects in the background).
    package private(set) var heardBroker = false
    package private(set) var refusedOverCapacity = 0
    /// The largest result the broker of this connection takes (its FEATURES after READY): a
    /// larger REPLY would close the connection before the broker saw it, and with it every task
    /// the worker holds. `nil` until the broker says (a broker that predates it never does).
    package private(set) var resultLimit: Int?
    /// The broker of this connection takes packed messages (its FEATURES named
    /// `WireFormat.packedFeature`): replies go packed, two frames instead of six, and the
    /// worker's own FEATURES asks for packed REQUESTs.
    package private(set) var brokerTakesPacked = false
    /// The broker of this connection takes PROGRESS (its FEATURES named
    /// ``ProgressReport/feature``); to another, handlers' reports go nowhere.
    package private(set) var brokerTakesProgress = false
    package private(set) var resultsTooLarge = 0
    /// Connections closed before their ZeroMQ handshake, in a row.
    private var handshake = HandshakeWatch()
    /// What the broker socket's monitor showed while no connection is up: named in the log
    /// line of a lost broker.
    private var unreachable = UnreachableCause()
    /// The service name the last REQUEST named (see ``NameCache``).
    private var serviceNames = NameCache()

    package init(configuration: Configuration, now: Instant, seed: UInt64 = .random(in: 1...(.max))) {
        self.configuration = configuration
        origin = now
        connectionStart = now
        liveness = BrokerLiveness(configuration: configuration.liveness, now: now, seed: seed)
        running = RunningTasks(
            minimumCapacity: min(4 * Int(configuration.announcement.capacity), Self.runningRoomLimit), seed: seed)
    }

    /// The worker starts: connect and register.
    package mutating func start(now: Instant, into actions: inout [Action]) {
        guard phase == .idle else { return }
        phase = .serving
        liveness.heard(now: now)
        connect(now: now, into: &actions)
    }

    /// A message arrived on connection `generation`.
    package mutating func received(_ frames: [[UInt8]], generation: Int, now: Instant, into actions: inout [Action]) {
        received(Frames(frames), generation: generation, now: now, into: &actions)
    }

    /// A message from the broker's socket of `generation`, in one buffer as the shell reads it.
    package mutating func received(_ frames: Frames, generation: Int, now: Instant, into actions: inout [Action]) {
        guard generation == self.generation, !isFinished else { return }
        liveness.heard(now: now)
        let command: BrokerToWorker
        do {
            command = try BrokerToWorker.decode(frames, names: &serviceNames)
        } catch {
            malformedMessages += 1
            actions.append(.log(.warning, "dropped a malformed message from the broker", ["error": "\(error)"]))
            return
        }
        if case .refused = command {} else { heardBroker = true }
        // Consumed: a request moves on into its start action instead of being copied out.
        switch consume command {
        case .request(let tag, let request), .packedRequest(let tag, let request):
            // Also while draining: the broker sent it before it saw DRAINING.
            accept(TaskKey(tag: tag, requestID: request.requestID), request, into: &actions)
        case .cancel(let tag, let requestID):
            // The handler is cancelled and its reply still goes back (docs/protocol.md): for a
            // client's CANCEL the broker keeps the credit taken until then.
            let key = TaskKey(tag: tag, requestID: requestID)
            guard let slot = running[key] else { return }
            actions.append(.cancelTask(key, slot: slot))
        case .drainingAcknowledged:
            guard case .draining(let deadline, _) = phase else { return }
            phase = .draining(deadline: deadline, brokerDone: true)
            finishIfDrained(into: &actions)
        case .refused(let reason):
            abandonAll(into: &actions)
            finish(.refused(reason), into: &actions)
        case .features(let lines):
            let features = BrokerFeatures(lines: lines)
            resultLimit = features.maxFrameSize
            if let milliseconds = features.heartbeatMilliseconds {
                adoptHeartbeat(.milliseconds(milliseconds), into: &actions)
            }
            brokerTakesProgress = features.takesProgress
            if features.takesPacked, !brokerTakesPacked {
                brokerTakesPacked = true
                // The last FEATURES counts: it names everything this worker takes.
                let names =
                    [BrokerFeatures.currentEditionLine, WireFormat.packedFeature]
                    + (configuration.takesTrace ? [TraceContext.feature] : [])
                actions.append(.send(.features(names)))
            }
        case .heartbeat:
            return
        case .disconnect:
            if case .draining = phase {
                // The broker no longer holds our tasks: registering again would only attract
                // new work, and results would be dropped. Leave.
                let left = abandonAll(into: &actions)
                finish(left == 0 ? .drained : .abandoned(tasks: left), into: &actions)
                return
            }
            actions.append(
                .log(
                    .warning,
                    "the broker does not know this worker: it restarted, or it presumed this worker lost because its heartbeats stopped (an inline handler that ran longer than the broker's liveness window stops them, or, with a broker that does not say its interval, this worker's --heartbeat-interval is longer than the broker's); registering again"
                ))
            _ = liveness.brokerDisconnected(now: now)
            reconnect(now: now, into: &actions)
        }
    }

    /// A handler finished: its reply goes to the broker if the task is still this worker's.
    /// - Parameter connection: the ``generation`` it came on, if known: a task of an earlier
    ///   connection was given up with it, and a broker that restarted may have delivered the
    ///   same task under the same tag on this one, whose place its late reply must not take.
    package mutating func taskFinished(
        _ key: TaskKey, reply: consuming TaskReply, connection: Int? = nil, now: Instant,
        into actions: inout [Action]
    ) {
        if let connection, connection != generation { return }
        // A finished machine holds no tasks (``finish(_:into:)``), so its late ones end here.
        guard let slot = running.remove(key) else { return }
        freeSlots.append(slot)
        if let resultLimit, reply.bodyBytes.count > resultLimit {
            resultsTooLarge += 1
            actions.append(
                .log(
                    .warning, "a handler's result is over the broker's frame limit; answered with a failure",
                    ["request": "\(key.requestID)", "bytes": "\(reply.bodyBytes.count)", "limit": "\(resultLimit)"]))
            reply = TaskReply.failure(
                reply.requestID, .handlerError, type: RemoteErrorBody.resultTooLargeType,
                message:
                    "the result is \(reply.bodyBytes.count) bytes and the broker takes at most \(resultLimit) (skybroker --max-frame-size); return a reference to the data instead, or raise the broker's limit",
                attempt: reply.attempt)
        }
        Self.send(consume reply, tag: key.tag, packed: brokerTakesPacked, into: &actions)
        finishIfDrained(into: &actions)
    }

    /// A running task's handler reported progress (``ProgressSink``): sent on to a broker that
    /// takes it, before the task's REPLY. A task that ended, was cancelled or came on an older
    /// connection reports nothing.
    package mutating func progress(_ key: TaskKey, _ report: ProgressReport, into actions: inout [Action]) {
        guard brokerTakesProgress, running[key] != nil, !isFinished else { return }
        actions.append(.send(.progress(tag: key.tag, key.requestID, report)))
    }

    /// The broker said its heartbeat interval: unless it is this worker's already, the worker
    /// heartbeats as often and judges the broker's silence by it. With another interval, a
    /// worker that heartbeated less often than the broker's liveness window was declared dead
    /// between two heartbeats and registered again, over and over; one that expected the
    /// broker's heartbeats more often than they came reconnected.
    private mutating func adoptHeartbeat(_ interval: Duration, into actions: inout [Action]) {
        let before = liveness.configuration.heartbeatInterval
        liveness.adopt(heartbeatInterval: interval)
        let adopted = liveness.configuration.heartbeatInterval
        guard adopted != before else { return }
        actions.append(.heartbeatEvery(adopted))
        actions.append(
            .log(
                .notice, "heartbeating at the broker's interval",
                ["interval": "\(Self.text(adopted))", "configured": "\(Self.text(before))"]))
    }

    /// Time passed: the broker's liveness and the drain's deadline.
    package mutating func tick(now: Instant, into actions: inout [Action]) {
        if case .draining(let deadline, _) = phase, now - origin >= deadline {
            let left = abandonAll(into: &actions)
            actions.append(
                .log(
                    .warning, "tasks unfinished when the drain grace ran out; the broker will run them elsewhere",
                    ["tasks": "\(left)", "grace": "\(Self.text(configuration.drainGrace))"]))
            finish(.abandoned(tasks: left), into: &actions)
            return
        }
        switch liveness.tick(now: now) {
        case .lost(let reconnectAt):
            // Stay on the connection, heartbeating, until then: a broker that comes back answers
            // the heartbeat with DISCONNECT, and the worker registers at once.
            actions.append(
                .log(
                    .warning, "no word from the broker; reconnecting",
                    [
                        "silence": "\(Self.text(configuration.liveness.expiry))",
                        "in": "\(Self.text(now.duration(to: reconnectAt)))",
                    ].merging(unreachable.text.map { ["seen": "\($0)"] } ?? [:]) { $1 }))
            if case .draining(let deadline, _) = phase {
                // A draining worker expects nothing more.
                phase = .draining(deadline: deadline, brokerDone: true)
                finishIfDrained(into: &actions)
            }
        case .connect:
            if case .draining = phase {
                // Draining without a broker: nobody would take the results. Leave.
                let left = abandonAll(into: &actions)
                finish(left == 0 ? .drained : .abandoned(tasks: left), into: &actions)
                return
            }
            // A silent broker may be frozen or cut off while another takes over: with several
            // endpoints the next one is tried.
            if configuration.endpointCount > 1 {
                nextEndpoint(now: now, into: &actions)
            } else {
                reconnect(now: now, into: &actions)
            }
        case nil:
            return
        }
    }

    /// A graceful stop (SIGTERM through the service group): say DRAINING, take what is already
    /// on the wire, finish what runs for up to the drain grace.
    package mutating func stop(now: Instant, into actions: inout [Action]) {
        switch phase {
        case .idle:
            finish(.drained, into: &actions)
        case .serving:
            let brokerGone = if case .waiting = liveness.state { true } else { false }
            phase = .draining(deadline: now - origin + configuration.drainGrace, brokerDone: brokerGone)
            actions.append(.send(.draining))
            actions.append(
                .log(
                    .info, "worker stopping: finishing its tasks",
                    ["tasks": "\(running.count)", "grace": "\(Self.text(configuration.drainGrace))"]))
            finishIfDrained(into: &actions)
        case .draining, .finished:
            return
        }
    }

    /// The worker must end now (its task was cancelled): nothing more is answered.
    package mutating func cancel(now: Instant, into actions: inout [Action]) {
        guard !isFinished else { return }
        let left = abandonAll(into: &actions)
        finish(left == 0 ? .drained : .abandoned(tasks: left), into: &actions)
    }

    /// The shell could not open connection `generation`. The first one: the endpoint is wrong,
    /// stop. A later one (the endpoint worked before): try again after a backoff.
    package mutating func connectFailed(
        _ reason: String, generation: Int, now: Instant, into actions: inout [Action]
    ) {
        guard generation == self.generation, !isFinished else { return }
        if generation == 1 {
            abandonAll(into: &actions)
            finish(.cannotConnect(reason), into: &actions)
            return
        }
        actions.append(.log(.error, "cannot open a connection to the broker", ["error": "\(reason)"]))
        liveness.lostNow(now: now)
    }

    /// libzmq's monitor saw `event` on connection `generation`.
    ///
    /// A connection that closes before its handshake completes, 3 times in a row, is a
    /// configuration mistake, not a broker that is down (whose port refuses the connection, and
    /// nothing is seen here): the endpoint is not a broker's workers port (its events port, whose
    /// socket type does not match, and libzmq then never reconnects), or the broker requires
    /// CURVE, or it has another key. The worker stops with that named; before, it reconnected
    /// forever saying only that the broker was silent. Each such close reconnects at once.
    package mutating func transport(
        _ event: ZMQMonitorEvent, generation: Int, now: Instant, into actions: inout [Action]
    ) {
        guard generation == self.generation, !isFinished else { return }
        unreachable.observe(event)
        switch event.kind {
        case .handshakeSucceeded:
            handshake.succeeded()
            handshaken = true
        case .disconnected:
            if handshake.closedBeforeHandshake() {
                abandonAll(into: &actions)
                finish(.cannotConnect(closedBeforeHandshake(event.endpoint)), into: &actions)
            } else if handshake.closedInARowSoFar > 0 {
                reconnect(now: now, into: &actions)
            } else if configuration.endpointCount > 1, handshaken, !isDraining {
                // The active broker is gone (killed, or it stepped down): another may be taking over.
                actions.append(
                    .log(.warning, "lost the broker; trying the next endpoint", ["endpoint": "\(event.endpoint)"]))
                nextEndpoint(now: now, into: &actions)
            }
        case .connectRetried:
            // Nothing listens there: a standby binds nothing.
            if configuration.endpointCount > 1, !handshaken, !isDraining,
                now - connectionStart >= Self.refusedEndpointDwell
            {
                nextEndpoint(now: now, into: &actions)
            }
        case .handshakeFailedAuth:
            abandonAll(into: &actions)
            finish(
                .refused(
                    "\(event.endpoint) refused this worker's key during the handshake (ZAP status \(event.value)): it is not on the broker's worker allow-list (--worker-keys)"
                ), into: &actions)
        default:
            break
        }
    }

    private func closedBeforeHandshake(_ endpoint: String) -> String {
        let cause =
            configuration.usesCurve
            ? "the broker public key given to this worker is not the broker's, or the broker does not use CURVE"
            : "the broker requires CURVE and this worker has no keys (--secret-key, --broker-key)"
        return
            "\(HandshakeWatch.strikes) connections in a row closed before their ZeroMQ handshake completed: \(endpoint) is not"
            + " a broker's workers endpoint (its events port? another program?), or \(cause)"
    }

    package var isFinished: Bool {
        phase == .finished
    }

    // MARK: Helpers

    private mutating func accept(
        _ key: consuming TaskKey, _ request: consuming TaskRequest, into actions: inout [Action]
    ) {
        if running.count >= Int(configuration.announcement.capacity), running[copy key] == nil {
            // The broker's credits never allow this; a broker that oversends gets a typed answer.
            refusedOverCapacity += 1
            let reply = TaskReply.failure(
                request.requestID, .overloaded, type: nil,
                message:
                    "worker \(configuration.announcement.name) already runs its capacity of \(configuration.announcement.capacity) tasks"
            )
            Self.send(reply, tag: key.tag, packed: brokerTakesPacked, into: &actions)
            return
        }
        // One probe both checks for a second delivery and takes the key. (With no slot left,
        // every slot is a running task's, this one's among them: the check above passed.)
        guard let slot = freeSlots.popLast() ?? newSlot() else { return duplicate(key, into: &actions) }
        if running.insert(copy key, slot: slot) != nil {
            freeSlots.append(slot)
            return duplicate(key, into: &actions)
        }
        // Both moved into the action (passed as they are, each was copied and this one destroyed).
        actions.append(.startTask(consume key, consume request, slot: slot))
    }

    private func duplicate(_ key: TaskKey, into actions: inout [Action]) {
        actions.append(.log(.warning, "dropped a second delivery of a running task", ["request": "\(key.requestID)"]))
    }

    /// A REPLY in the form the broker of this connection takes.
    /// Moved into the action: built through `?:`, the command copied the reply.
    /// Static, given what it reads: as a method of the machine, called from a mutating one, it
    /// was handed a copy of the whole machine (a 464-byte `memcpy` a task).
    private static func send(
        _ reply: consuming TaskReply, tag: DeliveryTag, packed: Bool, into actions: inout [Action]
    ) {
        if packed {
            actions.append(.send(.packedReply(tag: tag, consume reply)))
        } else {
            actions.append(.send(.reply(tag: tag, consume reply)))
        }
    }

    private var isDraining: Bool {
        if case .draining = phase { true } else { false }
    }

    /// Leaves the current broker endpoint for the next one (with several), on a new connection.
    private mutating func nextEndpoint(now: Instant, into actions: inout [Action]) {
        endpoint = (endpoint + 1) % configuration.endpointCount
        reconnect(now: now, into: &actions)
    }

    private mutating func connect(now: Instant, into actions: inout [Action]) {
        // A new connection may reach another broker: its limit and forms come with its FEATURES.
        resultLimit = nil
        brokerTakesPacked = false
        brokerTakesProgress = false
        unreachable.newSocket()
        connectionStart = now
        handshaken = false
        generation += 1
        actions.append(.connect(generation: generation))
    }

    /// A new connection: the tasks that came on older ones were given to other workers by the
    /// broker (or died with it), so they are cancelled and their replies not sent.
    private mutating func reconnect(now: Instant, into actions: inout [Action]) {
        if !running.isEmpty {
            actions.append(
                .log(
                    .info, "cancelled the tasks of the previous connection: the broker runs them elsewhere",
                    ["tasks": "\(running.count)"]))
        }
        abandonAll(into: &actions)
        connect(now: now, into: &actions)
    }

    @discardableResult
    private mutating func abandonAll(into actions: inout [Action]) -> Int {
        let count = running.count
        for (key, slot) in running.all.sorted(by: { Self.inRequestOrder($0.key, $1.key) }) {
            actions.append(.cancelTask(key, slot: slot))
        }
        running.removeAll()
        freeSlots.removeAll()
        slotsGiven = 0
        return count
    }

    /// A slot never given out yet, below the capacity.
    private mutating func newSlot() -> Int? {
        guard slotsGiven < Int(configuration.announcement.capacity) else { return nil }
        defer { slotsGiven += 1 }
        return slotsGiven
    }

    /// A duration for a log line, in whole milliseconds ("1250 ms").
    static func text(_ duration: Duration) -> String {
        "\(duration.wholeMilliseconds) ms"
    }

    /// A fixed order for actions over several tasks, so that tests can compare them.
    private static func inRequestOrder(_ a: TaskKey, _ b: TaskKey) -> Bool {
        (a.requestID.high, a.requestID.low) < (b.requestID.high, b.requestID.low)
    }

    private mutating func finishIfDrained(into actions: inout [Action]) {
        // The count first: while other tasks run (the common case) the phase is not read.
        guard running.isEmpty, case .draining(_, true) = phase else { return }
        finish(.drained, into: &actions)
    }

    /// Ends the machine. Nothing is answered after it, so it forgets any task still running
    /// (every path here has abandoned them already, or never had any).
    private mutating func finish(_ ending: Ending, into actions: inout [Action]) {
        phase = .finished
        running.removeAll()
        freeSlots.removeAll()
        actions.append(.finish(ending))
    }
}
