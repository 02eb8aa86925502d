import SkyProtocol
import SkyTasks
import SkyWire

extension SkyClient {
    /// How long an answer of `mmi.service` is trusted.
    static let serviceCacheLifetime = Duration.seconds(1)

    /// With a local fallback: whether this call should run here because the broker is not
    /// reachable (no connection for ``Configuration/localFallbackWait``) or has no worker for
    /// the service (asked at most once a second per service).
    func shouldRunLocally(_ service: String, system: ScanSystem) async -> Bool {
        guard await system.services.contains(service) else { return false }
        let now = time.now()
        if let down = shell.machine.withLock({ $0.table.disconnectedFor(now: now) }) {
            // Only the first calls wait; once the connection is known to be missing, run at once.
            let patience = configuration.localFallbackWait - down
            guard patience > .zero else { return true }
            let connected: Void? = try? await TimeoutTask(timeout: patience, clock: configuration.clock) {
                try await self.waitForConnection()
            }.value
            if connected == nil { return true }
        }
        return !(await brokerServes(service))
    }

    private func brokerServes(_ service: String) async -> Bool {
        let now = time.now()
        if let cached = serviceCache[service], now - cached.checkedAt < Self.serviceCacheLifetime {
            return cached.served
        }
        let answer = try? await executeRemotely(
            service: BrokerService.service, body: Array(service.utf8),
            options: ScanOptions(timeout: configuration.connectTimeout, retry: .never))
        let served = (try? answer?.result.get()) == Array("200".utf8)
        serviceCache[service] = (served, time.now())
        return served
    }

    /// Runs the call on the local system, within the call's attempt timeout.
    func runLocally(service: String, body: [UInt8], options: ScanOptions, system: ScanSystem) async throws -> Completion
    {
        localRuns += 1
        // The attempt's timeout rides in the header, as to a worker: the handler's
        // `TaskContext.deadline` reads it.
        let timeout = options.timeout.map { UInt32(clamping: max(1, $0.wholeMilliseconds)) } ?? 0
        let request = TaskRequest(
            requestID: .random(), service: service, header: RequestHeader(timeoutMilliseconds: timeout), body: body)
        let reply: TaskReply
        if let timeout = options.timeout {
            do {
                reply = try await TimeoutTask(timeout: timeout, clock: configuration.clock) {
                    await system.execute(request)
                }.value
            } catch is TimeoutError {
                return Completion(result: .failure(.timeout("the local run took longer than \(timeout)")), attempts: 1)
            }
        } else {
            reply = await system.execute(request)
        }
        try Task.checkCancellation()
        return Completion(
            result: reply.status == .ok ? .success(reply.body) : .failure(SkyError(failure: reply, service: service)),
            attempts: 1)
    }
}
