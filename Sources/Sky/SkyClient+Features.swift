import SkyProtocol

extension SkyClient {
    /// What the broker of this connection says of itself in `mmi.features`. The client's state
    /// machine asks once per connection as soon as it is up (a reconnect may reach another
    /// broker): its answer also makes calls packed and traced calls carry their frame. A broker
    /// that predates it answers `unknownService` at once, and says nothing more than the
    /// protocol's first edition. `nil`: no answer within `connectTimeout`, or cancelled.
    func brokerFeatures() async -> BrokerFeatures? {
        await shell.brokerFeatures()
    }
}
