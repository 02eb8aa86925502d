import SkyJSON
import SkyProtocol

/// Rate limits on services: at most so many starts a second of a service's calls and jobs
/// together, in bursts of at most so many, kept across broker restarts (with a journal). For
/// operators' tools; see docs/operations.md, "Rate limits".
extension SkyClient {
    /// Limits `service` (known to the broker or not) to `limit`; returns once it is on disk.
    /// It replaces the broker's own `--rate-limit` for the service until removed.
    /// - Returns: whether it changed anything (`false`: the service had this limit set).
    /// - Throws: ``SkyError/invalidTask(_:)`` for a limit the broker cannot keep (its
    ///   `RateLimit.problem`), a name no service can have, or a broker without rate limits;
    ///   ``SkyError/overloaded(_:)`` beyond the broker's 10,000 limited services;
    ///   ``SkyError/journalUnavailable(_:)`` if it could not be recorded (it was then undone).
    @discardableResult
    public nonisolated func setRateLimit(_ limit: RateLimit, for service: String) async throws -> Bool {
        if let problem = limit.problem { throw SkyError.invalidTask(problem) }
        let body = try CanonicalJSON.encode(ServiceRateLimit(service: service, limit: limit))
        return try await command(BrokerService.limitSet, service, body) != [0]
    }

    /// Removes the limit set for `service`; the broker's own `--rate-limit` for it, if any,
    /// applies again.
    /// - Returns: whether a limit was removed.
    @discardableResult
    public nonisolated func removeRateLimit(for service: String) async throws -> Bool {
        try await command(BrokerService.limitRemove, service, Array(service.utf8)) != [0]
    }

    /// Every limited service, by name, with what its limit did since the broker started.
    public nonisolated func rateLimits() async throws -> [RateLimitState] {
        let reply = try await command(BrokerService.limitList, nil, [])
        do {
            return try CanonicalJSON.decode(RateLimitListing.self, from: reply).limits
        } catch {
            throw SkyError.internalError("the broker's rate-limit listing is malformed: \(error)")
        }
    }

    private nonisolated func command(_ command: String, _ service: String?, _ body: [UInt8]) async throws -> [UInt8] {
        try await operatorCommand(
            command, service: service, body: body, feature: \.limitsRates,
            featureName: BrokerFeatures.rateLimitsFeature, lacking: "limit rates")
    }
}
