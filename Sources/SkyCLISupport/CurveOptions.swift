import ArgumentParser
import SkyZMQ

/// The flags a client, worker or watcher takes to reach a broker that runs CURVE.
public struct CurveOptions: ParsableArguments {
    @Option(help: "The broker's public key file (skybroker keygen's NAME.pub); with --secret-key, turns CURVE on.")
    public var brokerKey: String?

    @Option(help: "This process's secret key file (mode 0600); its public key must be on the broker's allow-list.")
    public var secretKey: String?

    public init() {}

    public func validate() throws {
        guard (brokerKey == nil) == (secretKey == nil) else {
            throw ValidationError("--broker-key and --secret-key go together: CURVE needs both")
        }
    }

    /// The credentials, or `nil` without CURVE. Exits with the key error's explanation.
    public func credentials(program: String) -> CurveCredentials? {
        guard let brokerKey, let secretKey else { return nil }
        do {
            return try CurveCredentials(brokerKeyFile: brokerKey, secretKeyFile: secretKey)
        } catch {
            ProcessSetup.fail(program, "\(error)")
        }
    }
}
