import Foundation
import Instrumentation
import Logging
import ServiceLifecycle
import SkyProtocol
import SkyTracing
import SkyWire
import SkyZMQ
import Tracing

/// Connects a `ScanSystem` to a broker: announces its name, capacity and services, runs every
/// task the broker sends, and returns the replies.
///
/// The shell of `WorkerStateMachine`, which decides everything: one I/O thread owns the
/// connection, feeds every message and tick to the machine inline and carries out its actions.
/// Heartbeats leave from that thread, so they keep flowing however busy the handlers keep the
/// cooperative pool. Handlers run on children of one task group inside the graceful-shutdown
/// handler (runners, each running task after task: `RunnerInbox`), on the pool or on the I/O
/// thread (``HandlerExecutor``); the broker's credits bound how many run. A finished handler
/// posts its reply to the I/O thread, which sends it.
///
/// On graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`) it tells the broker DRAINING
/// (no new tasks), lets the tasks it runs finish and reply for up to
/// ``Configuration/drainGrace``, says DISCONNECT, and closes. Tasks still running then are
/// cancelled and not answered: on DISCONNECT the broker gives them to another worker. `run()`
/// returns once their handlers have returned: a handler that ignores cancellation delays the
/// worker's exit, not the broker's re-dispatch.
public final class SkyWorker: Service, Sendable {
    public struct Configuration: Sendable {
        /// The broker's workers endpoint: the first of ``brokers``.
        public var broker: String {
            get { brokers[0] }
            set { brokers = [newValue] }
        }
        /// The workers endpoints of an active broker and its standbys on one job store
        /// (docs/operations.md, "High availability"): the worker uses one at a time and moves
        /// to the next when the connection is lost or refused, or the broker falls silent.
        /// Never empty.
        public private(set) var brokers: [String]
        /// Heartbeats, liveness and reconnect backoff.
        public var liveness: LivenessOptions
        /// How long a graceful stop waits for running tasks.
        public var drainGrace: Duration
        /// CURVE: the broker's public key and this worker's key pair (on the broker's worker
        /// allow-list). Required by a broker that runs with `--secret-key`.
        public var credentials: CurveCredentials?
        /// Where handlers run (see ``HandlerExecutor``): Swift's cooperative pool unless the
        /// handlers are short enough to share the I/O thread.
        public var handlerExecutor: HandlerExecutor
        /// Called once a broker first answered the worker (with anything but a refusal): its
        /// connection is up and its READY reached a broker. skyworker prints its ready line
        /// here, so that a script that waits for the line does not go on without a broker.
        public var onStarted: (@Sendable () -> Void)?

        /// A worker of an active broker and its standbys (`brokers` empty: the default endpoint).
        public init(
            brokers: [String], liveness: LivenessOptions = .init(), drainGrace: Duration = .seconds(30),
            credentials: CurveCredentials? = nil, handlerExecutor: HandlerExecutor = .pool
        ) {
            self.init(
                liveness: liveness, drainGrace: drainGrace, credentials: credentials, handlerExecutor: handlerExecutor)
            if !brokers.isEmpty { self.brokers = brokers }
        }

        public init(
            broker: String = "tcp://127.0.0.1:5556", liveness: LivenessOptions = .init(),
            drainGrace: Duration = .seconds(30), credentials: CurveCredentials? = nil,
            handlerExecutor: HandlerExecutor = .pool
        ) {
            self.brokers = [broker]
            self.handlerExecutor = handlerExecutor
            self.liveness = liveness
            self.drainGrace = drainGrace
            self.credentials = credentials
        }
    }

    private let configuration: Configuration
    private let system: ScanSystem
    private let logger: Logger

    /// Takes any configuration: values out of range are clamped, not trapped on
    /// (heartbeats and backoffs within skyworker's flag ranges; a negative drain grace is zero).
    public init(configuration: Configuration, system: ScanSystem, logger: Logger) {
        var configuration = configuration
        configuration.liveness = configuration.liveness.clamped
        configuration.drainGrace = configuration.drainGrace.asSleep
        self.configuration = configuration
        self.system = system
        self.logger = logger
    }

    /// A default worker name: host name and process id.
    public static var defaultName: String {
        "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
    }

    public func run() async throws {
        var table = await system.handlerTable
        table.logger = logger
        guard !table.services.isEmpty else { throw WorkerSetupError.noServices }
        // The broker refuses such a READY; say which name is wrong before connecting.
        let problems =
            [WireFormat.nameProblem(system.name, what: "worker name")]
            + table.services.map { WireFormat.nameProblem($0, what: "service name") }
            + table.services.map { service in
                service.hasPrefix(BrokerService.prefix)
                    ? "the service name \(service) starts with \(BrokerService.prefix), which names the broker's own services; give it another name"
                    : nil
            }
            + table.registeredTwice.map { service in
                "the service \(service) is registered twice on the ScanSystem (the last handler would replace the first): register each service once"
            }
        if let problem = problems.lazy.compactMap({ $0 }).first {
            throw WorkerSetupError.invalidName(problem)
        }
        for broker in configuration.brokers {
            if let problem = ZMQEndpoint.problem(broker, binding: false) {
                throw WorkerSetupError.cannotConnect(
                    endpoint: broker, reason: ZMQEndpoint.advice(broker, problem: problem))
            }
        }
        var logger = logger
        logger[metadataKey: "worker"] = "\(system.name)"
        let machine = WorkerStateMachine(
            configuration: .init(
                announcement: WorkerAnnouncement(
                    name: system.name, capacity: UInt32(system.capacity), services: table.services),
                liveness: configuration.liveness, drainGrace: configuration.drainGrace,
                usesCurve: configuration.credentials != nil, takesTrace: SkyTracing.active() != nil,
                endpointCount: configuration.brokers.count),
            now: .now)
        // Each task to a runner waiting for one; for the rest the group starts runners, asked
        // once (at most one wake-up) for every task that arrived together.
        let inbox = RunnerInbox()
        let shell = Shell(
            machine: machine, configuration: configuration, inbox: inbox, logger: logger, capacity: system.capacity,
            handlers: table)
        table.progressSinks = shell
        let handlers = table
        let tick = max(.milliseconds(10), configuration.liveness.heartbeatInterval / 10)
        let loop = try await ZMQEventLoop.start(
            name: "skyworker-io", sockets: [], tick: tick,
            handler: { batch, outbound in shell.handle(&batch, into: &outbound) })
        shell.loop.storeIfNil(loop)
        loop.post(input: Shell.Input.start)

        // On the I/O thread, the group's loop and its children run there too (nil: no preference).
        let executor: (any TaskExecutor)? = configuration.handlerExecutor == .ioThread ? loop : nil
        await withTaskExecutorPreference(executor) {
            await withGracefulShutdownHandler {
                await withTaskCancellationHandler {
                    await withDiscardingTaskGroup { group in
                        while let runners = await inbox.next() {
                            for _ in 0..<runners {
                                group.addTask { await Self.startRunner(inbox, handlers, shell, executor) }
                            }
                        }
                    }
                } onCancel: {
                    loop.post(input: Shell.Input.cancel)
                    // The group stops taking tasks at once, as the machine's cancel would have
                    // it, even if the loop can no longer take the input.
                    inbox.finish()
                }
            } onGracefulShutdown: {
                loop.post(input: Shell.Input.stop)
            }
        }

        switch shell.ending.withLock({ $0 }) ?? .drained {
        case .refused(let reason):
            await loop.shutdown(linger: 0)
            logger.error("the broker refused this worker", metadata: ["reason": "\(reason)"])
            throw WorkerSetupError.refused(reason)
        case .cannotConnect(let reason):
            await loop.shutdown(linger: 0)
            throw WorkerSetupError.cannotConnect(endpoint: configuration.broker, reason: reason)
        case .drained, .abandoned:
            // Let the last replies and the DISCONNECT leave before the sockets go.
            await loop.shutdown(linger: 2000)
            logger.info("worker disconnected")
        }
    }

    /// A child of the worker's task group that starts a runner and waits for it to end. The
    /// runner is a task of its own, not the child, so that the I/O thread can cancel it
    /// through its handle (``RunnerHandle``); the child passes its own cancellation on.
    private static func startRunner(
        _ inbox: RunnerInbox, _ handlers: ScanSystem.Handlers, _ shell: Shell, _ executor: (any TaskExecutor)?
    ) async {
        let runner = RunnerHandle()
        let task: Task<Void, Never>
        if let executor {
            task = Task(executorPreference: executor) {
                await Self.run(inbox, handlers: handlers, shell: shell, runner: runner)
            }
        } else {
            // Not `Task(executorPreference: nil)`: that still gave the task a preference record
            // (of no executor), and with one the runtime looks the preference up under the
            // task's status lock at every switch and enqueue, six times a task.
            task = Task {
                await Self.run(inbox, handlers: handlers, shell: shell, runner: runner)
            }
        }
        runner.started(task)
        await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// A runner: runs task after task from `inbox` (see ``RunnerInbox``) until none is left
    /// for it. It captures no task: a waiting runner holds no request's body.
    private nonisolated(nonsending) static func run(
        _ inbox: RunnerInbox, handlers: ScanSystem.Handlers, shell: Shell, runner: RunnerHandle
    ) async {
        var first = true
        while let run = await inbox.nextForRunner(first: first) {
            first = false
            await perform(run, handlers: handlers, shell: shell, runner: runner)
            // The runner of a cancelled task ends with it: a task stays cancelled.
            if Task.isCancelled { return }
        }
    }

    /// One task, on a runner the I/O thread can cancel alone.
    /// (On the child's executor: a hop to the global executor and back would cost a locked
    /// lookup of the child's executor preference each way.)
    private nonisolated(nonsending) static func perform(
        _ run: TaskRun, handlers: ScanSystem.Handlers, shell: Shell, runner: RunnerHandle
    ) async {
        shell.handles.attach(run.ticket, runner: runner)
        let started = shell.metrics.started()
        let reply: TaskReply
        if let tracer = shell.tracer {
            reply = await Self.traced(run.request, tag: run.key.tag, handlers: handlers, tracer: tracer)
        } else {
            reply = await handlers.execute(run.request, tag: run.key.tag)
        }
        shell.metrics.finished(run.request.service, reply.status, startedAt: started)
        shell.handles.detach(run.ticket)
        shell.taskFinished(Shell.FinishedTask(key: run.key, reply: reply, connection: run.connection))
    }

    /// Runs the handler inside a server span, a child of the request's trace context (the
    /// broker's span, or the client's), which the handler reaches as `ServiceContext.current`
    /// (to add attributes or start child spans).
    private nonisolated(nonsending) static func traced(
        _ request: TaskRequest, tag: DeliveryTag, handlers: ScanSystem.Handlers, tracer: some Tracer
    ) async
        -> TaskReply
    {
        let parent = SkyTracing.context(from: request.trace, tracer: tracer, base: ServiceContext.current ?? .topLevel)
        let span = tracer.startSpan("sky.handle \(request.service)", context: parent, ofKind: .server)
        span.attributes[SkyTracing.Attribute.system] = "sky"
        span.attributes[SkyTracing.Attribute.service] = request.service
        span.attributes[SkyTracing.Attribute.requestID] = request.requestID.description
        span.attributes[SkyTracing.Attribute.attempt] = Int(request.header.attempt)
        let reply = await ServiceContext.$current.withValue(span.context) {
            await handlers.execute(request, tag: tag)
        }
        span.attributes[SkyTracing.Attribute.status] = reply.status.description
        if reply.status != .ok {
            let error = RemoteErrorBody(decoding: reply.body)
            span.setStatus(SpanStatus(code: .error, message: "\(error.type): \(error.message)"))
        }
        span.end()
        return reply
    }

    /// A task the I/O thread started, on its way to a runner ("run", not "job": jobs are the
    /// broker's durable jobs).
    struct TaskRun: Sendable {
        var key: WorkerStateMachine.TaskKey
        var ticket: TaskHandles.Ticket
        var request: TaskRequest
        /// The connection it came on (``Shell/FinishedTask/connection``).
        var connection: Int
    }
}

public enum WorkerSetupError: Error, CustomStringConvertible {
    case noServices
    /// The worker's name or a service's is not one the protocol carries (the reason says which).
    case invalidName(String)
    /// The broker refused to register this worker (REFUSED), for the reason given.
    case refused(String)
    /// The first connection to the broker could not even be opened (a malformed endpoint, a
    /// host name that does not resolve): retrying would fail the same way.
    case cannotConnect(endpoint: String, reason: String)

    public var description: String {
        switch self {
        case .noServices: "the worker has no services: register at least one handler before running it"
        case .invalidName(let problem): "\(problem): choose another name"
        case .refused(let reason): "the broker refused this worker: \(reason)"
        case .cannotConnect(let endpoint, let reason):
            "cannot connect to the broker at \(endpoint): \(reason); check --broker (for example tcp://HOST:5556)"
        }
    }
}
