import Foundation
import Logging
import SkyProtocol
import SkyTasks
import SkyZMQ

/// Runs tasks on a Sky cluster.
///
/// ```swift
/// let sky = try await SkyClient(broker: "tcp://127.0.0.1:5555")
/// let report = try await sky.scan(ScanTask(sector: 42))
/// ```
///
/// Every call returns exactly once: a result, a ``SkyError``, or `CancellationError`; never a
/// hang, never a silent duplicate. Underneath, each call gets a unique ``RequestID``; attempts
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
    var table: RequestTable
    var loop: ZMQEventLoop?
    var starting: Task<ZMQEventLoop, any Error>?
    var socket = ZMQEventLoop.SocketID(0, name: "broker")
    var endpointIndex = 0
    var nextSocketNumber = 1
    var pump: Task<Void, Never>?
    var timer: Task<Void, Never>?
    var armedDeadline: Duration?
    var closed = false
    var nextWaiter: RequestTable.WaiterID = 0
    var waiters: [RequestTable.WaiterID: CheckedContinuation<Completion, any Error>] = [:]
    var connectionWaiters: [RequestTable.WaiterID: CheckedContinuation<Void, any Error>] = [:]
    var eventSinks: [ZMQEventLoop.SocketID: AsyncStream<SkyEvent>.Continuation] = [:]
    /// Why the broker refused an events subscription (its CURVE key is not a watcher's).
    var eventRefusals: [ZMQEventLoop.SocketID: String] = [:]
    var serviceCache: [String: (served: Bool, checkedAt: Duration)] = [:]
    /// Set once the broker refused this client's credentials; every call fails with it.
    var refusal: SkyError?
    var handshake = HandshakeWatch()
    var localRuns = 0
    /// This client's routing id at the broker, the same on every connection: the broker holds
    /// requests under it, so after a reconnect their replies still reach this client.
    let identity = RequestID.random().frame
    /// Request ids: 128 bits from a generator seeded at random, not the system's random source
    /// (one system call per id). Unique within the client; the broker keys them by client too.
    var requestIDs = SplitMix64(seed: UInt64.random(in: .min ... .max))

    /// How a call ended, with the attempts it took (for batch progress).
    struct Completion: Sendable {
        var result: Result<[UInt8], SkyError>
        var attempts: Int
    }

    /// Prepares a client of the broker at `broker`. Connects on first use.
    public init(broker: String = "tcp://127.0.0.1:5555", configuration: Configuration = Configuration()) async throws {
        try await self.init(brokers: [broker], configuration: configuration)
    }

    /// Prepares a client of a broker reachable at several endpoints (for example a primary and a
    /// standby), tried in order. Connects on first use.
    /// - Throws: ``SkyError/brokerUnreachable(_:)`` if the list is empty.
    public init(brokers: [String], configuration: Configuration = Configuration()) async throws {
        guard !brokers.isEmpty else { throw SkyError.brokerUnreachable("no broker endpoint was given") }
        endpoints = brokers
        self.configuration = configuration
        time = TimeSource(configuration.clock)
        table = RequestTable(
            connectTimeout: configuration.connectTimeout, endpointCount: brokers.count,
            noWorkersGrace: configuration.noWorkersGrace,
            seed: configuration.jitterSeed ?? UInt64.random(in: .min ... .max), now: time.now())
    }

    deinit {
        // Calls in flight keep the client alive, so none is waiting here; just free the thread.
        loop?.requestShutdown()
        timer?.cancel()
    }

    // MARK: Calls

    /// Runs a task on some worker and returns its result.
    /// - Parameters:
    ///   - options: timeouts, retries and coalescing for this call; `nil` takes the client's
    ///     ``Configuration/defaults``.
    ///   - coder: how the task and result are encoded (JSON by default); the workers of the
    ///     service must use the same one.
    /// - Throws: ``SkyError`` for every failure, `CancellationError` when the calling task is
    ///   cancelled.
    public func scan<T: SkyTask>(
        _ task: T, options: ScanOptions? = nil, coder: some TaskCoder = .json
    ) async throws -> T.Result {
        try await scanReportingAttempts(task, options: options, coder: coder).result.get()
    }

    /// Runs a task given as an encoded payload and returns the encoded result.
    public func request(service: String, body: [UInt8], options: ScanOptions? = nil) async throws -> [UInt8] {
        try await execute(service: service, body: body, options: options ?? configuration.defaults).result.get()
    }

    /// The broker's current view of the cluster (`mmi.workers`).
    public func clusterSnapshot() async throws -> ClusterSnapshot {
        let body = try await request(
            service: BrokerService.workers, body: [], options: ScanOptions(timeout: configuration.connectTimeout))
        do {
            return try JSONDecoder().decode(ClusterSnapshot.self, from: Data(body))
        } catch {
            throw SkyError.invalidResult("mmi.workers: \(error)")
        }
    }

    /// Callers waiting for a result now.
    public var inFlightCount: Int { table.waiterCount }

    /// Replies that matched no waiting call (late, duplicate, or for a cancelled call).
    public var unmatchedReplies: Int { table.counters.unmatchedReplies }

    public var statistics: Statistics {
        Statistics(
            counters: table.counters, localRuns: localRuns, callsInFlight: table.callCount,
            suspendedCallers: waiters.count + connectionWaiters.count + eventSinks.count,
            connected: table.isConnected, endpoint: endpoints[endpointIndex])
    }

    /// Closes the connection. Waiting calls throw ``SkyError/clientClosed``.
    public func close() async {
        guard !closed else { return }
        closed = true
        perform(table.closeAll())
        for waiter in connectionWaiters.values { waiter.resume(throwing: SkyError.clientClosed) }
        connectionWaiters.removeAll()
        for sink in eventSinks.values { sink.finish() }
        eventSinks.removeAll()
        timer?.cancel()
        timer = nil
        if loop == nil, let starting { loop = try? await starting.value }
        await loop?.shutdown()
        pump?.cancel()
    }

    // MARK: Running a call

    func scanReportingAttempts<T: SkyTask>(
        _ task: T, options: ScanOptions?, coder: some TaskCoder
    ) async throws -> (result: Result<T.Result, SkyError>, attempts: Int) {
        let body: [UInt8]
        do {
            body = try coder.encode(task)
        } catch {
            return (.failure(.invalidTask(String(describing: error))), 0)
        }
        let completion = try await execute(service: T.service, body: body, options: options ?? configuration.defaults)
        let result = completion.result.flatMap { reply -> Result<T.Result, SkyError> in
            do {
                return .success(try coder.decode(T.Result.self, from: reply))
            } catch {
                return .failure(.invalidResult(String(describing: error)))
            }
        }
        return (result, completion.attempts)
    }

    /// One call from start to outcome: locally if the fallback applies, else remotely within its
    /// overall deadline. Throws only `CancellationError`; every other failure is in the result.
    func execute(service: String, body: [UInt8], options: ScanOptions) async throws -> Completion {
        // The broker drops a request with an invalid name unanswered; refuse it here instead.
        guard WireFormat.isValidName(service) else {
            return Completion(
                result: .failure(
                    .invalidTask("service name \"\(service)\" is not 1...255 bytes of UTF-8 without control characters")
                ),
                attempts: 0)
        }
        guard !closed else { return Completion(result: .failure(.clientClosed), attempts: 0) }
        guard body.count <= configuration.maxRequestBytes else {
            return Completion(
                result: .failure(.requestTooLarge(bytes: body.count, limit: configuration.maxRequestBytes)), attempts: 0
            )
        }
        if let refusal { return Completion(result: .failure(refusal), attempts: 0) }
        if let fallback = configuration.localFallback, await shouldRunLocally(service, system: fallback) {
            return try await runLocally(service: service, body: body, options: options, system: fallback)
        }
        var completion: Completion
        if let deadline = options.deadline {
            do {
                completion = try await TimeoutTask(timeout: deadline, clock: configuration.clock) {
                    try await self.executeRemotely(service: service, body: body, options: options)
                }.value
            } catch is TimeoutError {
                completion = Completion(
                    result: .failure(.timeout("the call's deadline of \(deadline) passed")), attempts: 0)
            }
        } else {
            completion = try await executeRemotely(service: service, body: body, options: options)
        }
        if let fallback = configuration.localFallback, case .failure(let error) = completion.result,
            error.code == .brokerUnreachable || error.code == .noWorkers,
            await fallback.services.contains(service)
        {
            completion = try await runLocally(service: service, body: body, options: options, system: fallback)
        }
        return completion
    }

    func executeRemotely(service: String, body: [UInt8], options: ScanOptions) async throws -> Completion {
        do {
            try await startIfNeeded()
        } catch let error as SkyError {
            return Completion(result: .failure(error), attempts: 0)
        }
        nextWaiter += 1
        let waiter = nextWaiter
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Completion, any Error>) in
                if closed || refusal != nil {
                    continuation.resume(returning: Completion(result: .failure(refusal ?? .clientClosed), attempts: 0))
                } else if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    waiters[waiter] = continuation
                    let call = RequestTable.Call(service: service, body: body, options: options)
                    let id = RequestID(high: requestIDs.next(), low: requestIDs.next())
                    perform(table.start(call, id: id, waiter: waiter, now: time.now()))
                }
            }
        } onCancel: {
            Task { await self.abandon(waiter) }
        }
    }

    /// The caller's task was cancelled: it stops waiting now; the broker is told once no caller
    /// waits for the call, and drops the request or has its worker cancel the handler.
    private func abandon(_ waiter: RequestTable.WaiterID) {
        guard let continuation = waiters.removeValue(forKey: waiter) else { return }
        continuation.resume(throwing: CancellationError())
        perform(table.abandon(waiter))
    }
}
