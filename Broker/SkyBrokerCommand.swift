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
            Workers that miss --liveness heartbeats of --heartbeat-interval seconds are declared dead
            and their tasks run elsewhere. SIGTERM or SIGINT stops it: waiting and running requests
            are answered brokerShuttingDown, workers are told, and it exits 0.
            """)

    @Option(help: "Endpoint for clients (ROUTER).")
    var clients = BrokerConfiguration.defaultClientsEndpoint

    @Option(help: "Endpoint for workers (ROUTER).")
    var workers = BrokerConfiguration.defaultWorkersEndpoint

    @Option(help: "Endpoint for event subscribers (PUB).")
    var events = BrokerConfiguration.defaultEventsEndpoint

    @Option(help: "Largest frame a peer may send, in bytes; larger ones disconnect the peer.")
    var maxFrameSize: Int64 = 16 << 20

    @Option(help: "Seconds between heartbeats with workers.")
    var heartbeatInterval: Double = 1

    @Option(help: "Missed heartbeat intervals before a worker is declared dead.")
    var liveness = 3

    @Option(help: "Deliveries of one request before it fails with workerLost.")
    var maxDeliveries = 3

    @Option(help: "Requests that may wait for a worker; more are refused as overloaded.")
    var queueLimit = 100_000

    @Option(help: "Seconds a task may run past its deadline before it is taken from its worker.")
    var leaseGrace: Double = 5

    @Flag(help: "Publish task.dispatched and task.completed for every task (costs throughput).")
    var taskEvents = false

    @OptionGroup var common: CommonOptions

    func validate() throws {
        guard heartbeatInterval >= 0.01 else { throw ValidationError("--heartbeat-interval must be at least 0.01") }
        guard liveness >= 1 else { throw ValidationError("--liveness must be at least 1") }
        guard maxDeliveries >= 1 else { throw ValidationError("--max-deliveries must be at least 1") }
        guard queueLimit >= 0 else { throw ValidationError("--queue-limit must be 0 or more") }
        guard leaseGrace >= 0 else { throw ValidationError("--lease-grace must be 0 or more") }
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skybroker", options: common)
        var routing = BrokerStateMachine.Configuration()
        routing.heartbeatInterval = .milliseconds(Int64(heartbeatInterval * 1000))
        routing.liveness = liveness
        routing.maxDeliveries = maxDeliveries
        routing.queueLimit = queueLimit
        routing.leaseGrace = .milliseconds(Int64(leaseGrace * 1000))
        routing.taskEvents = taskEvents
        let configuration = BrokerConfiguration(
            clientsEndpoint: clients, workersEndpoint: workers, eventsEndpoint: events, maxFrameSize: maxFrameSize,
            routing: routing)
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
