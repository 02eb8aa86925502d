import Foundation
import Logging
import Sky
import SkyBrokerKit
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

/// A broker and its workers inside the test process: the same `Broker` and `SkyWorker` that
/// `skybroker` and `skyworker` run, on `ipc://` endpoints in a directory of its own, with no
/// process to start. For behaviour that needs no executable (no signal, no kill -9, no command
/// line): such tests run in parallel, in ``InProcessSuite``, beside the three serial lines.
///
/// `ipc://`, not `inproc://`: an `inproc://` endpoint is reachable only from sockets of the same
/// libzmq context, and the broker, workers and clients each own theirs, as they do in their own
/// processes. Sharing one would be a test-only door in the public API.
final class InProcessCluster: Sendable {
    let clients: String
    let workers: String
    let events: String
    private let directory: URL
    private let broker: Broker
    private let liveness: LivenessOptions
    private let running = Locked<[Task<Void, any Error>]>([])

    private init(broker: Broker, directory: URL, routing: BrokerRouting) {
        self.broker = broker
        self.directory = directory
        var liveness = LivenessOptions()
        liveness.heartbeatInterval = routing.heartbeatInterval
        liveness.liveness = routing.liveness
        self.liveness = liveness
        clients = broker.endpoints.clients
        workers = broker.endpoints.workers
        events = broker.endpoints.events
    }

    /// Starts a broker with skybroker's defaults and no journal, or as `configure` sets it (its
    /// workers take its heartbeat interval and liveness).
    static func start(_ configure: (inout BrokerConfiguration) -> Void = { _ in }) async throws -> InProcessCluster {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sky-inproc-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var configuration = BrokerConfiguration(
            clientsEndpoint: "ipc://\(directory.path)/clients", workersEndpoint: "ipc://\(directory.path)/workers",
            eventsEndpoint: "ipc://\(directory.path)/events")
        configure(&configuration)
        var logger = Logger(label: "in-process-broker")
        logger.logLevel = .warning
        let broker = try await Broker.start(configuration: configuration, logger: logger)
        let cluster = InProcessCluster(broker: broker, directory: directory, routing: configuration.routing)
        cluster.keep(Task { try await broker.run() })
        return cluster
    }

    /// A worker of `capacity` slots serving skyworker's built-in workloads, registered with
    /// the broker when this returns.
    func startWorker(name: String, capacity: Int = 4, flakyEvery: Int = 3) async throws {
        let system = ScanSystem(name: name, capacity: capacity)
        try await BuiltInWorkloads.register(BuiltInWorkloads.all, on: system, flakyEvery: flakyEvery)
        try await startWorker(system)
    }

    /// A worker hosting `system`, registered with the broker when this returns.
    func startWorker(_ system: ScanSystem, logger: Logger? = nil) async throws {
        var logger = logger ?? Logger(label: "in-process-worker")
        if logger.logLevel < .warning { logger.logLevel = .warning }
        let worker = SkyWorker(
            configuration: .init(broker: workers, liveness: liveness), system: system, logger: logger)
        let before = try await snapshot().workers.count
        keep(Task { try await worker.run() })
        try await eventually("the worker registered") { (try? await self.snapshot().workers.count) ?? 0 > before }
    }

    /// The broker's view of the cluster, read from it directly.
    func snapshot() async throws -> ClusterSnapshot {
        broker.snapshot()
    }

    /// Returns once exactly `count` workers are registered.
    func waitForWorkers(_ count: Int) async throws {
        try await eventually("\(count) workers registered") { self.broker.snapshot().workers.count == count }
    }

    /// Stops the workers, then the broker (each as SIGTERM would), and removes the directory.
    func stop() async {
        let tasks = running.withLock { $0 }
        for task in tasks.dropFirst().reversed() {
            task.cancel()
            _ = await task.result
        }
        tasks.first?.cancel()
        if let brokerRun = tasks.first { _ = await brokerRun.result }
        try? FileManager.default.removeItem(at: directory)
    }

    /// A test that threw before ``stop()`` leaves nothing running: the broker and the workers
    /// stop as cancelled tasks do (not awaited here).
    deinit {
        for task in running.withLock({ $0 }) { task.cancel() }
    }

    private func keep(_ task: Task<Void, any Error>) {
        running.withLock { $0.append(task) }
    }
}
