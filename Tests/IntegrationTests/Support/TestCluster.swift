import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyZMQ
import Testing

/// A real skybroker on free loopback ports, plus the workers and watchers a test starts.
/// `killAll()` (for `defer`) leaves no process behind; `stop()` ends them gracefully.
final class TestCluster: Sendable {
    private let currentBroker: Locked<SkyProcess>
    let clients: String
    let workers: String
    let events: String
    let brokerArguments: [String]
    private let processes = Locked<[SkyProcess]>([])

    /// The broker process (a new one after ``restartBroker()``).
    var broker: SkyProcess { currentBroker.withLock { $0 } }

    private init(broker: SkyProcess, clients: String, workers: String, events: String, arguments: [String]) {
        currentBroker = Locked(broker)
        self.clients = clients
        self.workers = workers
        self.events = events
        brokerArguments = arguments
        processes.withLock { $0.append(broker) }
        brokers.withLock { $0.append(broker) }
    }

    /// Fast failure detection for tests: 0.5 s heartbeats × 3.
    static let fastHeartbeats = ["--heartbeat-interval", "0.5", "--liveness", "3"]

    static func start(extraArguments: [String] = []) async throws -> TestCluster {
        let broker = try await StartedBroker.start(arguments: extraArguments)
        return TestCluster(
            broker: broker.process, clients: broker.clients, workers: broker.workers, events: broker.events,
            arguments: extraArguments)
    }

    /// What every broker this cluster started wrote to standard error, oldest first.
    var brokerLogs: [String] { brokers.withLock { $0 }.map(\.errorText) }
    private let brokers = Locked<[SkyProcess]>([])

    /// Starts a new broker on the same endpoints (after the old one was killed).
    func restartBroker() async throws {
        let broker = try await StartedBroker.start(
            clients: clients, workers: workers, events: events, arguments: brokerArguments)
        track(broker.process)
        brokers.withLock { $0.append(broker.process) }
        currentBroker.withLock { $0 = broker.process }
    }

    /// Starts `skywatch --json` and waits for its first snapshot, so its subscription is live.
    func startWatch() async throws -> SkyProcess {
        let watch = try track(SkyProcess("skywatch", ["--broker", clients, "--events", events, "--json"]))
        try await watch.waitForLine { $0.hasPrefix(#"{"snapshot":"#) }
        return watch
    }

    /// Starts a skyworker and waits until it printed its ready line.
    func startWorker(name: String, capacity: Int = 4, extraArguments: [String] = []) async throws -> SkyProcess {
        let worker = try track(
            SkyProcess(
                "skyworker",
                ["--broker", workers, "--name", name, "--capacity", "\(capacity)"] + heartbeatArguments
                    + extraArguments,
                name: name))
        try await worker.waitForLine { $0.hasPrefix("skyworker ready ") }
        return worker
    }

    /// The broker's heartbeat settings, which workers must share.
    private var heartbeatArguments: [String] {
        var result: [String] = []
        for flag in ["--heartbeat-interval", "--liveness"] {
            if let index = brokerArguments.firstIndex(of: flag), index + 1 < brokerArguments.count {
                result += [flag, brokerArguments[index + 1]]
            }
        }
        return result
    }

    @discardableResult
    func track(_ process: SkyProcess) -> SkyProcess {
        processes.withLock { $0.append(process) }
        return process
    }

    /// The broker's snapshot, through a client of its own.
    func snapshot() async throws -> ClusterSnapshot {
        let sky = try await SkyClient(broker: clients)
        defer { Task { await sky.close() } }
        return try await sky.clusterSnapshot()
    }

    /// A client whose events() reads this cluster's events endpoint.
    func watcher() async throws -> SkyClient {
        var configuration = SkyClient.Configuration()
        configuration.events = events
        return try await SkyClient(broker: clients, configuration: configuration)
    }

    /// Returns once exactly `count` workers are registered.
    func waitForWorkers(_ count: Int) async throws {
        try await eventually("\(count) workers registered") {
            (try? await snapshot().workers.count) == count
        }
    }

    /// SIGTERM to everything (workers first, broker last) and wait for each to exit. Under
    /// ThreadSanitizer (`ops/sky test --tsan`) a race report from any process fails the test.
    func stop() async {
        let all = processes.withLock { $0 }
        for process in all.reversed() {
            process.signal(SIGTERM)
            _ = try? await process.waitForExit(timeout: .seconds(10))
        }
        for process in all {
            #expect(!process.errorText.contains("ThreadSanitizer"), "\(process.name): \(process.errorText)")
        }
    }

    /// Every process's exit status and standard error, for failure messages.
    var diagnostics: String {
        processes.withLock { $0 }.map { process in
            "--- \(process.name) (pid \(process.pid), running: \(process.isRunning))\n\(process.errorText)"
        }.joined(separator: "\n")
    }

    /// SIGKILL to everything still running. Synchronous, for `defer`.
    func killAll() {
        for process in processes.withLock({ $0 }) { process.killNow() }
    }
}

/// skywatch's `--json` line for a snapshot.
struct SnapshotLine: Decodable {
    var snapshot: ClusterSnapshot
}

/// skywatch's last `--json` line: its worker table.
struct TableLine: Decodable {
    var table: [WorkerInfo]
}

extension SkyProcess {
    /// skywatch --json output decoded as events (lines that are not events are skipped).
    var events: [SkyEvent] {
        outputLines.compactMap { try? JSONDecoder().decode(SkyEvent.self, from: Data($0.utf8)) }
    }

    /// The workers skywatch knows of after the given lines of its `--json` output, replayed
    /// through the same `ClusterView` skywatch keeps. `nil` before a snapshot.
    static func watchedWorkers(_ lines: ArraySlice<String>) -> [String: WorkerInfo]? {
        let decoder = JSONDecoder()
        var view = ClusterView()
        for line in lines {
            if let snapshot = try? decoder.decode(SnapshotLine.self, from: Data(line.utf8)).snapshot {
                view.apply(.snapshot(snapshot))
            } else if view.snapshots > 0, let event = try? decoder.decode(SkyEvent.self, from: Data(line.utf8)) {
                view.apply(.event(event))
            }
        }
        return view.snapshots > 0 ? view.workers : nil
    }

    /// Waits until skywatch printed events satisfying `condition`.
    @discardableResult
    func waitForEvents(timeout: Duration = .seconds(20), _ condition: @escaping @Sendable ([SkyEvent]) -> Bool)
        async throws -> [SkyEvent]
    {
        let lines = try await waitUntil(timeout: timeout) { lines in
            condition(lines.compactMap { try? JSONDecoder().decode(SkyEvent.self, from: Data($0.utf8)) })
        }
        return lines.compactMap { try? JSONDecoder().decode(SkyEvent.self, from: Data($0.utf8)) }
    }
}
