import SkyProtocol

extension SkyClient {
    /// What the broker of this connection says of itself in `mmi.features`. The client's state
    /// machine asks once per connection as soon as it is up (a reconnect may reach another
    /// broker): its answer also makes calls packed and traced calls carry their frame. A broker
    /// that predates it answers `unknownService` at once, and says nothing more than the
    /// protocol's first edition. `nil`: no answer within `connectTimeout` (or by `deadline`,
    /// on the client's clock, if that comes first), or cancelled.
    /// A client whose first call asks this connects first, as any call does: without a
    /// connection nothing would ever answer.
    func brokerFeatures(by deadline: Duration? = nil) async -> BrokerFeatures? {
        // A client that cannot start answers nil here; the call that asked fails on its own.
        guard (try? await startIfNeeded()) != nil else { return nil }
        return await shell.brokerFeatures(by: deadline)
    }

    /// Whether the broker of this connection says it takes `feature`: from what it said last,
    /// else asked now. A call that needs an optional form checks this before it sends it (and
    /// so does skyctl, before it says what it will do).
    package nonisolated func brokerTakes(_ feature: KeyPath<BrokerFeatures, Bool>) async -> Bool {
        await brokerSays(feature) == true
    }

    /// As ``brokerTakes(_:)``, but `nil` when no broker answered (unreachable, or not a broker):
    /// a command then goes out anyway and fails saying why, not "upgrade the broker".
    package nonisolated func brokerSays(_ feature: KeyPath<BrokerFeatures, Bool>) async -> Bool? {
        if let known = shell.lastFeatures.withLock({ $0 }) { return known[keyPath: feature] }
        return await brokerFeatures()?[keyPath: feature]
    }

    /// Ends a call that needs `feature` of the broker before anything is sent: with
    /// `invalidTask` saying `lacking` when the broker answered without it, and with
    /// `brokerUnreachable` when no broker answered within the connect timeout. Telling a caller
    /// whose broker is down to upgrade it sent them the wrong way.
    nonisolated func requireBroker(
        _ feature: KeyPath<BrokerFeatures, Bool>, named name: String, lacking: String
    ) async throws(SkyError) {
        switch await brokerSays(feature) {
        case true?: return
        case false?: throw .invalidTask(lacking)
        case nil: throw silentBroker(needing: name)
        }
    }

    /// The failure of a call that had to learn what the broker takes first and heard nothing
    /// within the connect timeout: with what the transport saw of the endpoint, if anything
    /// ("nothing listens there"), and the feature the call needed, if one.
    package nonisolated func silentBroker(needing name: String? = nil) -> SkyError {
        .brokerUnreachable(
            "no broker said what it takes within the connect timeout (\(configuration.connectTimeout))"
                + (unreachableCause.map { ": \($0)" } ?? "")
                + (name.map { "; this call needs \($0) of it" } ?? "") + "; nothing was sent")
    }
}
