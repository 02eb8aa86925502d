import ArgumentParser

/// `skybroker`: runs the broker (`serve`, the default) or makes CURVE keys (`keygen`).
@main
struct SkyBrokerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skybroker",
        abstract: "The Sky broker: routes tasks from clients to workers; also makes CURVE keys.",
        subcommands: [ServeCommand.self, KeygenCommand.self],
        defaultSubcommand: ServeCommand.self)
}
