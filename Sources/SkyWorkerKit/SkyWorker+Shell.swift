import Logging
import SkyProtocol
import SkyTasks
import SkyTracing
import SkyWire
import SkyZMQ
import Synchronization

extension SkyWorker {
    /// Turns what the I/O thread read (and what other threads posted to it) into inputs of the
    /// ``WorkerStateMachine``, and its actions into messages, sockets and tasks. Runs on the I/O
    /// thread; the locks make it `Sendable` and are never contended.
    final class Shell: ProgressSinks {
        /// What other threads post to the I/O thread.
        enum Input: Sendable {
            case start
            /// A graceful stop was asked for.
            case stop
            /// The worker's task was cancelled: end now.
            case cancel
        }

        /// Posted when ``finished`` stops being empty: a type of its own, recognised by
        /// comparing types (a cast to ``Input`` ran the runtime's dynamic cast on every
        /// wake-up that brought replies).
        struct RepliesReady: Sendable {}

        let machine: Locked<WorkerStateMachine>
        let configuration: Configuration
        let inbox: RunnerInbox
        /// The handlers, for those the I/O thread runs itself (``ScanSystem/registerInline(_:coder:handler:)``);
        /// nil when none is inline, or when a tracer is bootstrapped (each handler then runs in
        /// its span, on a runner).
        let inlineHandlers: ScanSystem.Handlers.Lookup?
        let handles = TaskHandles()
        /// Replies of finished tasks, for the I/O thread: one lock each, and one post (so at
        /// most one wake-up) for all that finish before the thread takes them.
        /// (A struct, not a tuple: an array of tuples looked its type metadata up on every append.)
        let finished = Locked(InputQueue<FinishedTask>())
        /// Handlers' sinks with progress waiting, taken at each tick and before replies (so a
        /// task's last PROGRESS leaves before its REPLY). No post: a tick comes within a tenth
        /// of the heartbeat interval, which also bounds PROGRESS to ten a second per task.
        let progressed = Locked<[ProgressSink]>([])
        /// Whether ``progressed`` may hold a sink: read without its lock at each wake-up, which
        /// most find empty.
        let progressWaiting = Atomic<Bool>(false)
        /// Set once the loop started; read without a lock by every wake-up that has actions and
        /// by every finished task.
        let loop = LoopReference()
        /// How the machine ended, once it has.
        let ending = Locked<WorkerStateMachine.Ending?>(nil)
        let logger: Logger
        let metrics: WorkerMetrics
        /// The process's tracer, nil without one. With one, the worker announces the trace
        /// frame after READY (only then: a broker that predates it logs the unknown command).
        let tracer = SkyTracing.active()
        /// Whether the first start and the first answer were reported: read at every batch,
        /// without a lock.
        private let startedReported = Atomic<Bool>(false)
        private let answeredReported = Atomic<Bool>(false)
        /// Each wake-up's actions, in one buffer kept from wake-up to wake-up.
        let spareActions = SpareBuffer<WorkerStateMachine.Action>()
        /// The inline handlers' replies, and the actions they lead to, in buffers kept from batch
        /// to batch: two lists made and freed with every batch that ran a handler inline.
        let spareFinished = SpareBuffer<FinishedTask>()
        /// The buffer ``finished`` is traded for, kept from wake-up to wake-up.
        let spareReplies = SpareBuffer<FinishedTask>()
        let spareFollowing = SpareBuffer<WorkerStateMachine.Action>()

        init(
            machine: WorkerStateMachine, configuration: Configuration, inbox: RunnerInbox,
            logger: Logger, capacity: Int, handlers: ScanSystem.Handlers
        ) {
            let anyInline = handlers.services.contains(where: handlers.isInline)
            inlineHandlers = tracer == nil && anyInline ? handlers.lookup : nil
            metrics = WorkerMetrics(capacity: capacity)
            self.machine = Locked(machine)
            self.configuration = configuration
            self.inbox = inbox
            self.logger = logger
        }

        struct FinishedTask: Sendable {
            var key: WorkerStateMachine.TaskKey
            var reply: TaskReply
            /// The connection it came on (``WorkerStateMachine/generation``): a broker that
            /// restarted may deliver the same task under the same tag on the next one.
            var connection: Int
        }

        /// Each finished task's reply moved out of `list` into the machine, in order (the list
        /// keeps the rest of each entry until it is given back): iterating the list copied each
        /// entry and its reply again.
        private static func hand(
            _ list: inout [FinishedTask], to machine: inout WorkerStateMachine, now: MonotonicInstant,
            into actions: inout [WorkerStateMachine.Action]
        ) {
            for index in list.indices {
                var reply = TaskReply(requestID: RequestID(high: 0, low: 0), status: .ok, body: [])
                swap(&reply, &list[index].reply)
                machine.taskFinished(
                    list[index].key, reply: consume reply, connection: list[index].connection, now: now, into: &actions)
            }
        }

        /// A handler finished (called from its task).
        func taskFinished(_ task: consuming FinishedTask) {
            // Moved into the queue through the lock's closure, not copied.
            var moving = Optional(consume task)
            if finished.withLock({ $0.append(moving.take()!) }) == .first {
                loop.load()?.post(input: RepliesReady())
            }
        }

        func sink(tag: DeliveryTag, requestID: RequestID) -> ProgressSink {
            ProgressSink(tag: tag, requestID: requestID) { [self] sink in
                progressed.withLock { $0.append(sink) }
                progressWaiting.store(true, ordering: .releasing)
            }
        }

        /// Hands what handlers reported to the machine.
        private func sendProgress(_ machine: inout WorkerStateMachine, into actions: inout [WorkerStateMachine.Action])
        {
            // Most wake-ups find none, and take no lock. A sink added after the flag is cleared
            // is taken now or at the next wake-up.
            guard progressWaiting.load(ordering: .acquiring) else { return }
            progressWaiting.store(false, ordering: .relaxed)
            let sinks = progressed.withLock { sinks -> [ProgressSink] in
                defer { sinks = [] }
                return sinks
            }
            for sink in sinks {
                guard let report = sink.take() else { continue }
                machine.progress(.init(tag: sink.tag, requestID: sink.requestID), report, into: &actions)
            }
        }

        /// What the machine learns from libzmq's monitor (see ``WorkerStateMachine/transport(_:generation:now:into:)``).
        static let monitoredEvents: ZMQMonitorEvent.Kind.Set = [
            .handshakeSucceeded, .disconnected, .handshakeFailed, .connected, .connectRetried,
        ]

        static func socket(_ generation: Int) -> ZMQEventLoop.SocketID {
            ZMQEventLoop.SocketID(generation, numbered: "broker")
        }

        func handle(_ batch: inout [ZMQEventLoop.Inbound], into outbound: inout some OutboundSink) {
            var actions = spareActions.take()
            let now = MonotonicInstant.now
            var started = false
            var answered = false
            let generation = machine.withLock { machine in
                defer { answered = machine.heardBroker }
                // Each message moved out of the batch, not copied (see `takeEach`).
                batch.takeEach(leaving: .tick) { inbound in
                    switch consume inbound {
                    case .message(let socket, let message):
                        machine.received(message.content, generation: socket.rawValue, now: now, into: &actions)
                    case .tick:
                        sendProgress(&machine, into: &actions)
                        machine.tick(now: now, into: &actions)
                    case .input(let posted) where type(of: posted) == RepliesReady.self:
                        sendProgress(&machine, into: &actions)
                        var replies = spareReplies.take()
                        finished.withLock { $0.take(into: &replies) }
                        Self.hand(&replies, to: &machine, now: now, into: &actions)
                        spareReplies.giveBack(&replies)
                    case .input(let input as Input):
                        switch input {
                        case .start: machine.start(now: now, into: &actions)
                        case .stop: machine.stop(now: now, into: &actions)
                        case .cancel: machine.cancel(now: now, into: &actions)
                        }
                    case .opened(let socket, .success):
                        if socket.rawValue == 1 { started = true }
                    case .opened(let socket, .failure(let error)):
                        machine.connectFailed(
                            "\(error.underlying)", generation: socket.rawValue, now: now, into: &actions)
                    case .monitor(let socket, let event):
                        machine.transport(event, generation: socket.rawValue, now: now, into: &actions)
                    case .input, .sendFailed:
                        return
                    }
                }
                return machine.generation
            }
            let firstStart = started && !startedReported.exchange(true, ordering: .relaxed)
            if firstStart {
                let announcement = machine.withLock { $0.configuration.announcement }
                logger.info(
                    "worker registering",
                    metadata: [
                        "broker": "\(configuration.brokers.joined(separator: ","))",
                        "capacity": "\(announcement.capacity)",
                        "services": "\(announcement.services.joined(separator: ","))",
                    ])
            }
            if answered, !answeredReported.load(ordering: .relaxed),
                !answeredReported.exchange(true, ordering: .relaxed)
            {
                configuration.onStarted?()
            }
            execute(&actions, generation: generation, into: &outbound)
            spareActions.giveBack(&actions)
        }

        private func execute(
            _ actions: inout [WorkerStateMachine.Action], generation: Int, into outbound: inout some OutboundSink
        ) {
            guard !actions.isEmpty, let loop = loop.load() else { return }
            // Once a connection was asked for in this batch, messages go through the mailbox
            // too, behind its opening, instead of leaving before the socket exists.
            var connectQueued = false
            // Tasks with no waiting runner wake the group's loop once, after the batch (and only a
            // batch that queued some takes the inbox's lock for it).
            var queued = false
            defer { if queued { inbox.flush() } }
            // Replies of the inline handlers run below, for the machine once these actions are done.
            var ranInline = spareFinished.take()
            // Each action moved out, not copied (a task's request is handed on, not retained and
            // released); `.connect(generation: 0)` (a plain value) is left in its place.
            actions.takeEach(leaving: .connect(generation: 0)) { (action: consuming WorkerStateMachine.Action) in
                // A message, the most common action, sent from the action it is in (borrowed): bound
                // by the `switch consume` below, the command was copied out of it whole.
                if Self.sendIfMessage(
                    action, generation: generation, behindConnect: connectQueued, loop: loop, into: &outbound)
                {
                    return
                }
                switch consume action {
                case .connect(let number):
                    connectQueued = true
                    let socket = Self.socket(number)
                    let endpoint = configuration.brokers[machine.withLock { $0.endpoint }]
                    loop.requestOpen(
                        .brokerDealer(
                            id: socket, endpoint: endpoint, highWaterMark: 100_000,
                            credentials: configuration.credentials, monitor: Self.monitoredEvents))
                    let announcement = machine.withLock { $0.configuration.announcement }
                    loop.send(WorkerToBroker.ready(announcement).encode(), on: socket)
                    if tracer != nil {
                        loop.send(
                            WorkerToBroker.features([BrokerFeatures.currentEditionLine, TraceContext.feature]).encode(),
                            on: socket)
                    }
                    // The broker's interval once it said it (FEATURES), else the configured one.
                    let interval = machine.withLock { $0.liveness.configuration.heartbeatInterval }
                    loop.sendPeriodically(WorkerToBroker.heartbeat.encode(), on: socket, every: interval)
                    if number > 1 { loop.close(Self.socket(number - 1), linger: 0) }
                case .heartbeatEvery(let interval):
                    loop.sendPeriodically(
                        WorkerToBroker.heartbeat.encode(), on: Self.socket(generation), every: interval)
                case .send:
                    return  // sent above
                case .startTask(let key, let request, let slot):
                    if let run = inlineHandlers?.inlineHandler(for: request.service) {
                        ranInline.append(FinishedTask(key: key, reply: runInline(request, run), connection: generation))
                        return
                    }
                    let ticket = handles.reserve(key, slot: slot)
                    if inbox.offer(TaskRun(key: key, ticket: ticket, request: request, connection: generation)) {
                        queued = true
                    }
                case .cancelTask(let key, let slot):
                    handles.cancel(key, slot: slot)
                case .finish(let ending):
                    self.ending.withLock { $0 = ending }
                    switch ending {
                    case .drained, .abandoned:
                        Self.send(
                            .disconnect, generation: generation, behindConnect: connectQueued, loop: loop,
                            into: &outbound)
                    case .refused, .cannotConnect: break
                    }
                    inbox.finish()
                case .log(let level, let message, let metadata):
                    log(level, message, metadata)
                }
            }
            guard !ranInline.isEmpty else { return spareFinished.giveBack(&ranInline) }
            // Their replies, and whatever else the machine does then (a drain that ends).
            let now = MonotonicInstant.now
            var more = spareFollowing.take()
            machine.withLock { Self.hand(&ranInline, to: &$0, now: now, into: &more) }
            spareFinished.giveBack(&ranInline)
            execute(&more, generation: generation, into: &outbound)
            spareFollowing.giveBack(&more)
        }

        /// A machine's log line. Out of line: inlined into ``execute(_:generation:into:)``, the
        /// read of the logger's storage (a class in swift-log, read under the runtime's
        /// exclusivity check) was hoisted to the top of every batch, which logs next to never.
        @inline(never)
        private func log(_ level: Logger.Level, _ message: String, _ metadata: Logger.Metadata) {
            logger.log(level: level, "\(message)", metadata: metadata)
        }

        /// One task whose handler is inline, run on the I/O thread: no ticket, no runner, and
        /// nothing to cancel (it ends before a cancellation could be read).
        private func runInline(_ request: TaskRequest, _ run: ScanSystem.InlineRawHandler) -> TaskReply {
            let started = metrics.started()
            let reply = ScanSystem.Handlers.execute(request, inline: run)
            metrics.finished(request.service, reply.status, startedAt: started)
            return reply
        }

        /// ``send(_:generation:behindConnect:loop:into:)`` of a `.send` action; false for any other.
        private static func sendIfMessage(
            _ action: WorkerStateMachine.Action, generation: Int, behindConnect: Bool, loop: ZMQEventLoop,
            into outbound: inout some OutboundSink
        ) -> Bool {
            guard case .send(let command) = action else { return false }
            send(command, generation: generation, behindConnect: behindConnect, loop: loop, into: &outbound)
            return true
        }

        /// A message to the broker: through the mailbox, behind the opening of its socket, once a
        /// connection was asked for in this batch (it would leave before the socket exists
        /// otherwise). Not a function nested in ``execute(_:generation:into:)``: one capturing its
        /// variables put them in a box whose every access the runtime checked for exclusivity.
        /// Borrowed, not consumed: a `switch consume` made the compiler copy the reply it bound
        /// before it destroyed the command; bound from a borrowed command, it is borrowed too.
        private static func send(
            _ command: WorkerToBroker, generation: Int, behindConnect: Bool, loop: ZMQEventLoop,
            into outbound: inout some OutboundSink
        ) {
            let socket = socket(generation)
            if behindConnect {
                loop.send([ZMQEventLoop.Outbound(socket: socket, message: command.frames())])
                return
            }
            switch command {
            case .packedReply(let tag, let reply):
                WorkerToBroker.lendPackedReply(tag: tag, reply.requestID, reply.status, body: reply.bodyBytes) {
                    outbound.send(socket: socket, parts: $0)
                }
            case let other:
                outbound.append(ZMQEventLoop.Outbound(socket: socket, message: other.frames()))
            }
        }
    }
}
