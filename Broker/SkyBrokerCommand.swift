import ArgumentParser
import Logging
import ServiceLifecycle
import SkyBrokerKit
import SkyCLISupport
import UnixSignals

@main
struct SkyBrokerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skybroker",
        abstract: "Routes Sky tasks from clients to workers and publishes cluster events.",
        discussion: """
            Clients connect to --clients, workers to --workers, watchers (skywatch) to --events.
            A tcp port of * picks a free port; the endpoints actually bound are printed on
            standard output as one line: "skybroker ready clients=... workers=... events=...".
            SIGTERM or SIGINT stops it.
            """)

    @Option(help: "Endpoint for clients (ROUTER).")
    var clients = BrokerConfiguration.defaultClientsEndpoint

    @Option(help: "Endpoint for workers (ROUTER).")
    var workers = BrokerConfiguration.defaultWorkersEndpoint

    @Option(help: "Endpoint for event subscribers (PUB).")
    var events = BrokerConfiguration.defaultEventsEndpoint

    @Option(help: "Largest frame a peer may send, in bytes; larger ones disconnect the peer.")
    var maxFrameSize: Int64 = 16 << 20

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skybroker", options: common)
        let configuration = BrokerConfiguration(
            clientsEndpoint: clients, workersEndpoint: workers, eventsEndpoint: events, maxFrameSize: maxFrameSize)
        let broker: Broker
        do {
            broker = try await Broker.start(configuration: configuration, logger: logger)
        } catch {
            ProcessSetup.fail("skybroker", "\(error)")
        }
        let bound = broker.endpoints
        ProcessSetup.line("skybroker ready clients=\(bound.clients) workers=\(bound.workers) events=\(bound.events)")
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: broker)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}
