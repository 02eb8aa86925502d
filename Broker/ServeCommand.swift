import ArgumentParser
import Logging
import ServiceLifecycle
import SkyBrokerKit
import SkyCLISupport
import SkyZMQ
import UnixSignals

/// `skybroker [serve]`: runs the broker.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Routes Sky tasks from clients to workers and publishes cluster events (the default).",
        discussion: """
            Clients connect to --clients, workers to --workers, watchers (skywatch) to --events.
            A tcp port of * picks a free port; the endpoints actually bound are printed on
            standard output as one line: "skybroker ready clients=... workers=... events=...".
            Workers that miss --liveness heartbeats of --heartbeat-interval seconds are declared dead
            and their tasks run elsewhere. SIGTERM or SIGINT stops it: waiting and running requests
            are answered brokerShuttingDown, workers are told, and it exits 0.
            With --secret-key, every socket runs CURVE and admits only the keys on its role's
            allow-list (--client-keys, --worker-keys, --watcher-keys: a directory of .pub files or
            a file with one key per line, re-read when it changes); see docs/security.md.
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

    @Option(help: "Most frames a message may have; more are dropped and counted.")
    var maxFrames = 16

    @Option(help: "The broker's secret key file (skybroker keygen); turns CURVE on for every socket.")
    var secretKey: String?

    @Option(help: "Client public keys allowed (a directory of .pub files, or a file of keys).")
    var clientKeys: String?

    @Option(help: "Worker public keys allowed (a directory of .pub files, or a file of keys).")
    var workerKeys: String?

    @Option(help: "Watcher (skywatch) public keys allowed on the events socket.")
    var watcherKeys: String?

    @OptionGroup var common: CommonOptions

    func validate() throws {
        guard heartbeatInterval >= 0.01 else { throw ValidationError("--heartbeat-interval must be at least 0.01") }
        guard liveness >= 1 else { throw ValidationError("--liveness must be at least 1") }
        guard maxDeliveries >= 1 else { throw ValidationError("--max-deliveries must be at least 1") }
        guard queueLimit >= 0 else { throw ValidationError("--queue-limit must be 0 or more") }
        guard leaseGrace >= 0 else { throw ValidationError("--lease-grace must be 0 or more") }
        guard maxFrames >= 6 else { throw ValidationError("--max-frames must be at least 6 (a request has 6)") }
        if secretKey == nil && [clientKeys, workerKeys, watcherKeys].contains(where: { $0 != nil }) {
            throw ValidationError("allow-lists need --secret-key: without it the broker runs without CURVE")
        }
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
        var configuration = BrokerConfiguration(
            clientsEndpoint: clients, workersEndpoint: workers, eventsEndpoint: events, maxFrameSize: maxFrameSize,
            routing: routing)
        configuration.maxFramesPerMessage = maxFrames
        if let secretKey {
            do {
                var lists: [BrokerSecurity.Role: String] = [:]
                lists[.client] = clientKeys
                lists[.worker] = workerKeys
                lists[.watcher] = watcherKeys
                configuration.security = BrokerSecurity(keys: try CurveKeyFile.readSecret(secretKey), allowLists: lists)
            } catch {
                ProcessSetup.fail("skybroker", "\(error)")
            }
        }
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
