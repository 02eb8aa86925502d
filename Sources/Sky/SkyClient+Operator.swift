import SkyProtocol

/// What the operators' commands to the broker (`mmi.services.*`, `mmi.limits.*`) share.
extension SkyClient {
    /// Sends `command` with `body` about `service` (if it names one), once the broker said it
    /// takes it; returns the answer's body.
    /// - Parameters:
    ///   - feature: what the broker says in `mmi.features` when it takes the command.
    ///   - lacking: what the broker cannot do without it, for the error (`pause services`).
    /// - Throws: ``SkyError/invalidTask(_:)`` for a name no service can have, a broker that
    ///   does not take the command, or a body the broker refuses (its `invalidPayload`, whose
    ///   advice about task types would mislead here).
    nonisolated func operatorCommand(
        _ command: String, service: String?, body: [UInt8], feature: KeyPath<BrokerFeatures, Bool>,
        featureName: String, lacking: String
    ) async throws -> [UInt8] {
        if let service, let problem = WireFormat.nameProblem(service, what: "service name") {
            throw SkyError.invalidTask(problem)
        }
        // No answer at all: the command goes out with the attempts left (none, for a tool that
        // tries once), and fails naming the cause.
        let says = await brokerSays(feature)
        guard says != false else {
            throw SkyError.invalidTask(
                "this broker does not \(lacking) (it names no \(featureName) in mmi.features); upgrade the broker")
        }
        do {
            return try await jobCall(command, body, attemptsSpent: says == nil ? 1 : 0)
        } catch SkyError.invalidPayload(let message) {
            throw SkyError.invalidTask(message)
        }
    }
}
