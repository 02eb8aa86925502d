import Foundation
import Logging
import SkyJSON
import SkyProtocol
import SkyTasks
import SkyTracing
import SkyZMQ
import Synchronization
import Tracing

/// Runs tasks on a Sky cluster.
///
/// ```swift
/// let sky = try await SkyClient(broker: "tcp://127.0.0.1:5555")
/// let report = try await sky.scan(ScanTask(sector: 42))
/// ```
///
/// Every call returns exactly once: a result, a ``SkyError``, or `CancellationError`; never a
/// hang, never a silent duplicate. Underneath, each call gets a unique `RequestID`; attempts
/// that time out or fail transiently are retried with the same id after a backoff
/// (``RetryPolicy``); late and duplicate replies are discarded and counted. Concurrent calls of
/// an equal task share one execution (``ScanOptions/coalesce``). Cancelling the calling task
/// throws `CancellationError` at once and cancels the task at the broker and its worker.
///
/// The connection is made on first use (concurrent first callers share it), owned by one I/O
/// thread, and remade when lost: calls in flight then are sent again. Given several broker
/// endpoints, the client moves to the next when one stays unreachable. Call ``close()`` when
/// done (dropping the last reference also frees the connection, without waiting).
public actor SkyClient {
    /// The broker's clients endpoints, tried in order.
    public nonisolated let endpoints: [String]
    /// The first of ``endpoints``.
    public nonisolated var broker: String { endpoints[0] }
    public nonisolated let configuration: Configuration

    let time: TimeSource
    /// The connection: the state machine on the I/O thread, and the callers it resumes. Every
    /// call goes through it without entering the actor.
    nonisolated let shell: Shell
    /// How the I/O thread's handler reaches ``shell``, until this client goes.
    nonisolated let handlerTarget: HandlerTarget
    nonisolated let metrics: ClientMetrics
    var starting: Task<ZMQEventLoop, any Error>?
    var closed = false
    var nextEventSocket = Shell.firstEventSocket
    var serviceCache: [String: (served: Bool, checkedAt: Duration)] = [:]
    var localRuns = 0
    /// The tracer, resolved once: nil when none is bootstrapped, and calls are not traced.
    nonisolated let tracer: (any Tracer)?
    /// No tracer and no local fallback: a callback's call may go straight to the I/O thread.
    /// Resolved once: testing the existential for nil copied it, every call.
    nonisolated let untracedWithoutFallback: Bool

    /// Makes a call's trace frame (nil: none to send), by the call's deadline (on the client's
    /// clock) if it has one: it may ask the broker first.
    typealias TraceFrameSource = @Sendable (_ deadline: Duration?) async -> [UInt8]?

    /// How a call ended, with the attempts it took (for batch progress).
    struct Completion: Sendable {
        var result: Result<[UInt8], SkyError>
        var attempts: Int

        /// The `outcome` label of the client's metrics.
        var outcome: String {
            switch result {
            case .success: "ok"
            case .failure(let error): error.code.rawValue
            }
        }
    }

    /// Prepares a client of the broker at `broker`. Connects on first use.
    public init(broker: String = "tcp://127.0.0.1:5555", configuration: Configuration = Configuration()) async throws {
        try await self.init(brokers: [broker], configuration: configuration)
    }

    /// Prepares a client of an active broker and its standbys on one job store (docs/operations.md,
    /// "High availability"), or of one broker reachable at several endpoints. It uses one
    /// endpoint at a time, the first first; it moves to the next at once when the connection is
    /// lost, soon when nothing listens there (a standby binds nothing), and after
    /// ``Configuration/connectTimeout`` when one completes no handshake. Calls in flight are sent
    /// again on the next connection. Connects on first use.
    /// - Throws: ``SkyError/wrongEndpoint(_:)`` if the list is empty, or for a string that is
    ///   not a ZeroMQ endpoint (such as `localhost:5555`, which libzmq would refuse with only
    ///   "Invalid argument"): a mistake in the caller's code, not a broker out of reach.
    public init(brokers: [String], configuration: Configuration = Configuration()) async throws {
        guard !brokers.isEmpty else {
            throw SkyError.wrongEndpoint(
                "no broker endpoint was given: SkyClient(brokers:) takes one or more, like tcp://127.0.0.1:5555")
        }
        for endpoint in brokers + (configuration.eventsList ?? []) {
            if let problem = ZMQEndpoint.problem(endpoint, binding: false) {
                throw SkyError.wrongEndpoint(ZMQEndpoint.advice(endpoint, problem: problem))
            }
        }
        endpoints = brokers
        self.configuration = configuration
        metrics = ClientMetrics(factory: configuration.metricsFactory)
        tracer = SkyTracing.active(configuration.tracer)
        untracedWithoutFallback = tracer == nil && configuration.localFallback == nil
        time = TimeSource(configuration.clock)
        let table = RequestTable(
            connectTimeout: configuration.connectTimeout, endpointCount: brokers.count,
            noWorkersGrace: configuration.noWorkersGrace,
            seed: configuration.jitterSeed ?? UInt64.random(in: .min ... .max), now: time.now())
        let machine = ClientStateMachine(
            endpoints: brokers, usesCredentials: configuration.credentials != nil, table: table,
            seed: UInt64.random(in: .min ... .max))
        // This client's routing id at the broker, the same on every connection: the broker
        // holds requests under it, so after a reconnect their replies still reach this client.
        shell = Shell(machine: machine, time: time, configuration: configuration, identity: RequestID.random().frame)
        handlerTarget = HandlerTarget(shell)
    }

    deinit {
        // The loop's handler lets go of the shell, which the loop holds through it.
        handlerTarget.release()
        // Calls in flight keep the client alive, so none is waiting here; just free the thread.
        shell.loop.load()?.requestShutdown()
        shell.closed()
    }

    // MARK: Calls

    /// Runs a task on some worker and returns its result.
    ///
    /// The call runs on the caller's executor (it is `nonisolated(nonsending)`), encoding the
    /// task there, until it waits for the reply: no hop to the global executor and back at each
    /// step (for a caller that prefers ``ioThreadExecutor`` each hop also took a lock to find
    /// the preference).
    /// - Parameters:
    ///   - task: what to run; its type names the service and the result.
    ///   - options: timeouts, retries and coalescing for this call; `nil` takes the client's
    ///     ``Configuration/defaults``.
    ///   - coder: how the task and result are encoded (JSON by default); the workers of the
    ///     service must use the same one.
    /// - Throws: ``SkyError`` for every failure, `CancellationError` when the calling task is
    ///   cancelled.
    public nonisolated(nonsending) func scan<T: SkyTask>(
        _ task: T, options: ScanOptions? = nil, coder: some TaskCoder = .json
    ) async throws -> T.Result {
        // No `Result` of the task's type on the way: its generic metadata, looked up on every
        // call, cost as much as matching the reply.
        let body = try Self.encode(task, coder: coder)
        let reply = try await execute(service: T.service, body: body, options: options ?? configuration.defaults)
            .result.get()
        return try Self.decode(T.Result.self, from: reply, coder: coder)
    }

    /// Runs a task given as an encoded payload and returns the encoded result (on the caller's
    /// executor until it waits for the reply, as ``scan(_:options:coder:)`` does).
    public nonisolated(nonsending) func request(service: String, body: [UInt8], options: ScanOptions? = nil)
        async throws -> [UInt8]
    {
        try await execute(service: service, body: body, options: options ?? configuration.defaults).result.get()
    }

    /// The broker's current view of the cluster (`mmi.workers`).
    public func clusterSnapshot() async throws -> ClusterSnapshot {
        let body = try await request(
            service: BrokerService.workers, body: [], options: ScanOptions(timeout: configuration.connectTimeout))
        do {
            return try CanonicalJSON.decode(ClusterSnapshot.self, from: body)
        } catch {
            throw SkyError.invalidResult("mmi.workers: \(error)")
        }
    }

    /// Callers waiting for a result now.
    public var inFlightCount: Int { shell.machine.withLock { $0.table.waiterCount } }

    /// Replies that matched no waiting call (late, duplicate, or for a cancelled call).
    public var unmatchedReplies: Int { shell.machine.withLock { $0.table.counters.unmatchedReplies } }

    public var statistics: Statistics {
        let (counters, callsInFlight, connected, endpoint) = shell.machine.withLock {
            // A closed (or refused) client's table may not have heard its connection go yet.
            ($0.table.counters, $0.table.callCount, $0.table.isConnected && $0.refusal == nil, $0.endpointIndex)
        }
        let suspended =
            shell.calls.withLock(\.count) + shell.connectionWaiters.withLock(\.count)
            + shell.eventSinks.withLock(\.count)
        return Statistics(
            counters: counters, localRuns: localRuns, callsInFlight: callsInFlight, suspendedCallers: suspended,
            connected: connected, endpoint: endpoints[endpoint])
    }

    /// How long, in milliseconds, ``close()`` lets the CANCELs of the calls it ends take to
    /// leave: on a live connection they leave in microseconds; a broker that stopped reading
    /// costs the close this much at most.
    static let closeLinger: Int32 = 200

    /// Closes the connection. Waiting calls throw ``SkyError/clientClosed``, and the calls that
    /// were out are cancelled at the broker (a kept call is kept as a job, as at its deadline).
    public func close() async {
        guard !closed else { return }
        closed = true
        var loop = shell.loop.load()
        if loop == nil, let starting { loop = try? await starting.value }
        // The machine fails every call and connection waiter on the I/O thread and cancels its
        // calls at the broker; then the thread stops, letting those CANCELs leave for up to
        // ``closeLinger`` (a broker that is away gets none), and whatever was posted too late is
        // failed here.
        shell.post(.close)
        await loop?.shutdown(linger: Self.closeLinger)
        shell.closed()
    }

    // MARK: Running a call

    nonisolated(nonsending) func scanReportingAttempts<T: SkyTask>(
        _ task: T, options: ScanOptions?, coder: some TaskCoder
    ) async throws -> (result: Result<T.Result, SkyError>, attempts: Int) {
        let body: [UInt8]
        do {
            body = try Self.encode(task, coder: coder)
        } catch {
            return (.failure(error), 0)
        }
        let completion = try await execute(service: T.service, body: body, options: options ?? configuration.defaults)
        let result = completion.result.flatMap { reply in
            Result { () throws(SkyError) in try Self.decode(T.Result.self, from: reply, coder: coder) }
        }
        return (result, completion.attempts)
    }

    /// A task's payload.
    private static func encode(_ task: some Encodable, coder: some TaskCoder) throws(SkyError) -> [UInt8] {
        do {
            return try coder.encode(task)
        } catch {
            throw .invalidTask("the task could not be encoded: \(error)")
        }
    }

    /// A reply's result.
    private static func decode<Value: Decodable>(
        _ type: Value.Type, from reply: [UInt8], coder: some TaskCoder
    ) throws(SkyError) -> Value {
        do {
            return try coder.decode(type, from: reply)
        } catch {
            throw .invalidResult(String(describing: error))
        }
    }

    /// One call from start to outcome: locally if the fallback applies, else remotely within its
    /// overall deadline. Throws only `CancellationError`; every other failure is in the result.
    nonisolated(nonsending) func execute(service: String, body: [UInt8], options: ScanOptions) async throws
        -> Completion
    {
        // Without a metrics backend the clock is not read: two readings a call, for nothing.
        guard metrics.enabled else {
            return try await executeTracedOrNot(service: service, body: body, options: options)
        }
        metrics.started()
        let started = ContinuousClock.now
        var outcome = "cancelled"
        var attempts = 0
        defer { metrics.finished(service, outcome: outcome, attempts: attempts, after: ContinuousClock.now - started) }
        let completion = try await executeTracedOrNot(service: service, body: body, options: options)
        attempts = completion.attempts
        outcome = completion.outcome
        return completion
    }

    /// The call without the metrics ``execute(service:body:options:)`` records: in a span if a
    /// tracer was resolved. The optional tracer is looked at only then: testing it for nil
    /// copied the existential, every call.
    private nonisolated(nonsending) func executeTracedOrNot(
        service: String, body: [UInt8], options: ScanOptions
    ) async throws -> Completion {
        if !untracedWithoutFallback, let tracer {
            return try await executeTraced(service: service, body: body, options: options, tracer: tracer)
        }
        // What a completion's call does (``start(service:body:options:_:)``): two async frames
        // fewer a call than through ``executeMeasured(service:body:options:trace:)``, each
        // allocated and freed on the task, for a call with nothing to await first.
        if goesStraightToTheMachine(body: body, options: options) {
            if let refused = refusedAtOnce(service: service, body: body, options: options, checkingName: false) {
                return refused
            }
            return try await shell.call(
                RequestTable.Call(service: service, body: body, options: options, trace: nil, startedAt: nil))
        }
        return try await executeMeasured(service: service, body: body, options: options)
    }

    /// Whether a call needs nothing awaited before it reaches the client's machine: no span, no
    /// local fallback, a started client, a body within every broker's frame limit, and none of
    /// the options that ask the broker what it takes first.
    nonisolated func goesStraightToTheMachine(body: [UInt8], options: ScanOptions) -> Bool {
        untracedWithoutFallback && shell.loop.load() != nil && body.count <= BrokerFeatures.smallestFrameLimit
            && options.concurrencyKey == nil && options.concurrencyLimit == nil && !options.keepIfAbandoned
    }

    /// A call refused before anything is sent (a bad name, timeout or deadline, a body over
    /// the client's limit); `nil`: it may go.
    /// - Parameter checkingName: whether the service name is checked here too; not for a call
    ///   that goes straight to the client's machine, which checks it on the I/O thread.
    nonisolated func refusedAtOnce(
        service: String, body: [UInt8], options: ScanOptions, checkingName: Bool = true
    ) -> Completion? {
        // The broker drops a request with an invalid name unanswered; refuse it here instead.
        if checkingName, let problem = WireFormat.nameProblem(service, what: "service name") {
            return Completion(result: .failure(.invalidTask(problem)), attempts: 0)
        }
        // Each attempt would time out at once and be retried, sending work that nobody waits for.
        if let timeout = options.timeout, timeout <= .zero {
            return Completion(
                result: .failure(
                    .invalidTask(
                        "ScanOptions.timeout is \(timeout): give each attempt a positive time, or nil for none")),
                attempts: 0)
        }
        // A deadline that is zero or negative has passed before the call started; answered
        // `timeout`, it would read "raise the timeout or add workers", which helps nobody.
        if let deadline = options.deadline, deadline <= .zero {
            return Completion(
                result: .failure(
                    .invalidTask(
                        "ScanOptions.deadline is \(deadline): the call's deadline had passed before it started; give the whole call a positive time, or nil for none"
                    )),
                attempts: 0)
        }
        guard body.count <= configuration.maxRequestBytes else {
            return Completion(
                result: .failure(.requestTooLarge(bytes: body.count, limit: configuration.maxRequestBytes)), attempts: 0
            )
        }
        return nil
    }

    /// ``execute(service:body:options:)`` without its metrics.
    nonisolated(nonsending) func executeMeasured(
        service: String, body: [UInt8], options: ScanOptions, trace: TraceFrameSource? = nil
    ) async throws -> Completion {
        if let refused = refusedAtOnce(service: service, body: body, options: options) { return refused }
        // A kept call is the broker's to keep: run here, it would leave no job behind.
        if let fallback = configuration.localFallback, !options.keepIfAbandoned {
            // A refused client fails at once rather than pass for one whose broker is away.
            if let refusal = shell.machine.withLock(\.refusal) {
                return Completion(result: .failure(refusal), attempts: 0)
            }
            if await shouldRunLocally(service, system: fallback) {
                return try await runLocally(service: service, body: body, options: options, system: fallback)
            }
        }
        var completion = try await executeRemotely(service: service, body: body, options: options, trace: trace)
        if let fallback = configuration.localFallback, !options.keepIfAbandoned,
            case .failure(let error) = completion.result,
            error.code == .brokerUnreachable || error.code == .noWorkers,
            await fallback.services.contains(service)
        {
            completion = try await runLocally(service: service, body: body, options: options, system: fallback)
        }
        return completion
    }

    /// A call that needs `feature` (named `name` in `mmi.features`) of the broker, ended before
    /// anything is sent if the broker does not name it (`message` says why), if no broker
    /// answered (``requireBroker(_:named:lacking:)``), or if the client cannot start; `nil`: it
    /// may go.
    private nonisolated(nonsending) func refusal(
        unless feature: any KeyPath<BrokerFeatures, Bool> & Sendable, named name: String, _ message: String
    ) async -> Completion? {
        if shell.loop.load() == nil {
            do {
                try await startIfNeeded()
            } catch let error as SkyError {
                return Completion(result: .failure(error), attempts: 0)
            } catch {
                return Completion(result: .failure(.internalError("\(error)")), attempts: 0)
            }
        }
        do {
            try await requireBroker(feature, named: name, lacking: message)
        } catch {
            return Completion(result: .failure(error), attempts: 0)
        }
        return nil
    }

    /// One call to the broker, within `options.deadline`: a timer of the call's own in the
    /// client's machine ends it on time, every attempt and backoff included, even if a handler
    /// ignores cancellation; what comes before the request goes out (asking the broker what it
    /// takes) ends by then too.
    /// - Parameter trace: makes the trace frame to send, if any.
    nonisolated(nonsending) func executeRemotely(
        service: String, body: [UInt8], options: ScanOptions, trace: TraceFrameSource? = nil
    ) async throws -> Completion {
        var options = options
        if options.concurrencyKey != nil || options.concurrencyLimit != nil {
            if let problem = options.concurrencyProblem {
                return Completion(result: .failure(.invalidTask(problem)), attempts: 0)
            }
            // One customer's call: shared with another's, it would run under the other's key.
            options.coalesce = false
            if let refusal = await refusal(
                unless: \.takesConcurrencyKeys, named: BrokerFeatures.concurrencyKeysFeature,
                "this broker takes no concurrency keys (it names no \(BrokerFeatures.concurrencyKeysFeature) in mmi.features): upgrade it, or call without concurrencyKey"
            ) {
                return refusal
            }
        }
        if options.keepIfAbandoned {
            // One attempt, its own (its id becomes the job's), lasting until the deadline: the
            // caller leaves the call at its deadline only (an attempt's timeout would drop it).
            options.coalesce = false
            options.retry = .never
            if options.deadline == nil { options.deadline = options.timeout }
            options.timeout = options.deadline
            if let refusal = await refusal(
                unless: \.keepsAbandonedCalls, named: BrokerFeatures.keepIfAbandonedFeature,
                "this broker does not keep abandoned calls (it names no \(BrokerFeatures.keepIfAbandonedFeature) in mmi.features: it keeps no journal, --state-dir none, or predates them); give it a journal or upgrade it, or call without keepIfAbandoned"
            ) {
                return refusal
            }
        }
        // libzmq closes the connection of a peer that sends a frame over the broker's
        // --max-frame-size, before the broker sees it: sent, the task would go again on every
        // reconnect and stall every call on the connection. A body within the smallest limit a
        // broker takes needs no question (and costs the call nothing).
        let starts = shell.loop.load() == nil
        let asksFirst = starts || trace != nil || body.count > BrokerFeatures.smallestFrameLimit
        // The clock is read here only for a call that may wait before it reaches the machine,
        // which counts from its own reading otherwise.
        let startedAt = asksFirst && options.deadline != nil ? time.now() : nil
        let deadline = startedAt.flatMap { start in options.deadline.map { start + $0 } }
        if starts {
            do {
                try await startIfNeeded()
            } catch let error as SkyError {
                return Completion(result: .failure(error), attempts: 0)
            }
        }
        if body.count > BrokerFeatures.smallestFrameLimit, let limit = await brokerFeatures(by: deadline)?.maxFrameSize,
            body.count > limit
        {
            return Completion(result: .failure(.requestTooLarge(bytes: body.count, limit: limit)), attempts: 0)
        }
        let frame = await trace?(deadline)
        return try await shell.call(
            RequestTable.Call(service: service, body: body, options: options, trace: frame, startedAt: startedAt))
    }
}
