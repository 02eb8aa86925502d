import SkyJSON
import SkyProtocol

/// Rate limits on services: at most so many starts a second of a service's calls and jobs
/// together, in bursts of at most so many, on the whole service or per key, kept across broker
/// restarts (with a journal). For operators' tools; see docs/operations.md, "Rate limits".
extension SkyClient {
    /// Limits `service` (known to the broker or not) to `limit`, on the whole service or, with a
    /// `limit.key`, per key (a service may have one of each); returns once it is on disk. It
    /// replaces the broker's own `--rate-limit` (or `--key-rate-limit`) for the service until
    /// removed.
    /// - Returns: whether it changed anything (`false`: the service had this limit set).
    /// - Throws: ``SkyError/invalidTask(_:)`` for a limit the broker cannot keep (its
    ///   `RateLimit.problem`), a name no service can have, or a broker without rate limits (per
    ///   key: one that does not say it takes them); ``SkyError/overloaded(_:)`` beyond the
    ///   broker's 10,000 limits; ``SkyError/journalUnavailable(_:)`` if it could not be recorded
    ///   (it was then undone).
    @discardableResult
    public nonisolated func setRateLimit(_ limit: RateLimit, for service: String) async throws -> Bool {
        if let problem = limit.problem { throw SkyError.invalidTask(problem) }
        if limit.isPerKey { try await requirePerKey() }
        let body = try CanonicalJSON.encode(ServiceRateLimit(service: service, limit: limit))
        return try await command(BrokerService.limitSet, service, body) != [0]
    }

    /// Removes the limit set for `service` (its per-key limit with `perKey`); the broker's own
    /// `--rate-limit` (or `--key-rate-limit`) for it, if any, applies again.
    /// - Returns: whether a limit was removed.
    @discardableResult
    public nonisolated func removeRateLimit(for service: String, perKey: Bool = false) async throws -> Bool {
        if perKey { try await requirePerKey() }
        let body = perKey ? Array("\(service)\n\(BrokerService.limitRemoveKeyLine)".utf8) : Array(service.utf8)
        return try await command(BrokerService.limitRemove, service, body) != [0]
    }

    /// A broker that does not say it takes per-key limits would read one as a limit on the
    /// whole service: nothing per key is sent to it.
    private nonisolated func requirePerKey() async throws {
        try await requireBroker(
            \.limitsRatesPerKey, named: BrokerFeatures.keyRateLimitsFeature,
            lacking:
                "this broker does not limit rates per key (it names no \(BrokerFeatures.keyRateLimitsFeature) in mmi.features); upgrade the broker"
        )
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
