import SkyJSON
import SkyProtocol

/// Pausing services: a paused service's waiting calls and jobs wait (calls up to their
/// deadline), what runs finishes, and the pause is kept across broker restarts (with a
/// journal). For operators' tools; see docs/operations.md, "Pausing a service".
extension SkyClient {
    /// Pauses `service` (known to the broker or not: its work waits from its first request);
    /// returns once the pause is on disk.
    /// - Returns: whether it changed anything (`false`: it was paused already).
    /// - Throws: ``SkyError/invalidTask(_:)`` for a name no service can have, or a broker that
    ///   does not pause services; ``SkyError/overloaded(_:)`` beyond the broker's 10,000 paused
    ///   services; ``SkyError/journalUnavailable(_:)`` if it could not be recorded (it was then
    ///   undone).
    @discardableResult
    public nonisolated func pause(service: String) async throws -> Bool {
        try await control(BrokerService.servicePause, service)
    }

    /// Resumes `service`: its waiting calls and jobs start.
    /// - Returns: whether it changed anything (`false`: it was not paused).
    @discardableResult
    public nonisolated func resume(service: String) async throws -> Bool {
        try await control(BrokerService.serviceResume, service)
    }

    /// Every service the broker knows (served, with work waiting, or paused), by name.
    public nonisolated func services() async throws -> [ServiceState] {
        let reply = try await command(BrokerService.serviceList, nil, [])
        do {
            return try CanonicalJSON.decode(ServiceListing.self, from: reply).services
        } catch {
            throw SkyError.internalError("the broker's service listing is malformed: \(error)")
        }
    }

    /// The concurrency keys of `service` with calls or jobs waiting or running under a limit,
    /// those with the most waiting first (at most 100): who fills its queue.
    /// - Throws: ``SkyError/invalidTask(_:)`` for a name no service can have, or a broker that
    ///   takes no concurrency keys.
    public nonisolated func keys(of service: String) async throws -> KeyListing {
        let reply = try await operatorCommand(
            BrokerService.serviceKeys, service: service, body: Array(service.utf8), feature: \.takesConcurrencyKeys,
            featureName: BrokerFeatures.concurrencyKeysFeature, lacking: "take concurrency keys")
        do {
            return try CanonicalJSON.decode(KeyListing.self, from: reply)
        } catch {
            throw SkyError.internalError("the broker's key listing is malformed: \(error)")
        }
    }

    private nonisolated func control(_ command: String, _ service: String) async throws -> Bool {
        try await self.command(command, service, Array(service.utf8)) != [0]
    }

    private nonisolated func command(_ command: String, _ service: String?, _ body: [UInt8]) async throws -> [UInt8] {
        try await operatorCommand(
            command, service: service, body: body, feature: \.pausesServices,
            featureName: BrokerFeatures.servicePauseFeature, lacking: "pause services")
    }
}
