import ArgumentParser
import SkyProtocol

/// The service a `skyctl services` or `skyctl limits` command takes, and the broker it asks.
struct ServiceNameArguments: ParsableArguments {
    @Argument(help: "The service's name (1 to 255 bytes).")
    var name: String

    @OptionGroup var options: BrokerOptions

    func validate() throws {
        if let problem = WireFormat.nameProblem(name, what: "service name") { throw ValidationError(problem) }
        if name.hasPrefix(BrokerService.prefix) {
            throw ValidationError(
                "\(name) is one of the broker's own services (mmi.*): they cannot be paused or limited, and take no keys"
            )
        }
    }
}
