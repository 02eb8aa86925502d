import SkyProtocol

/// The cluster as a watcher sees it: the last snapshot with every later event applied.
///
/// Feed it what ``SkyClient/events()`` yields. Workers come and go with `worker.connected` and
/// `worker.disconnected`; their load (running, completed, last heard) and the broker's totals
/// come with each `broker.stats` (once a second by default).
public struct ClusterView: Sendable, Equatable {
    /// Connected workers by id.
    public private(set) var workers: [String: WorkerInfo] = [:]
    /// Ids of workers that said they are draining.
    public private(set) var draining: Set<String> = []
    public private(set) var queued = 0
    public private(set) var inFlight = 0
    /// Tasks workers finished, failures included (not the broker's own answers).
    public private(set) var completed: UInt64 = 0
    /// Of ``completed``, those that were not a success (0 from brokers that do not say).
    public private(set) var failed: UInt64 = 0
    public private(set) var tasksPerSecond = 0.0
    /// Durable jobs at the broker, when it keeps a journal.
    public private(set) var jobs: JobCounts?
    /// Per service, as of the last `broker.stats`: queue, rate, failures, latency.
    public private(set) var services: [String: ServiceStats] = [:]
    /// The broker's counters, as of the last snapshot or `broker.stats` that had them
    /// (`BrokerCounters.drops` is what it dropped or refused).
    public private(set) var counters: BrokerCounters?
    /// The number of the last event applied (or of the snapshot).
    public private(set) var seq: UInt64 = 0
    /// Snapshots taken so far: 1 at the start, more after gaps or broker restarts.
    public private(set) var snapshots = 0

    public init() {}

    private static let idle = ServiceStats(
        queued: 0, completed: 0, failed: 0, completedPerSecond: 0, p50Milliseconds: nil, p99Milliseconds: nil)

    /// Workers in a stable order: by name, then id.
    public var sortedWorkers: [WorkerInfo] {
        workers.values.sorted { ($0.name, $0.id) < ($1.name, $1.id) }
    }

    public mutating func apply(_ change: ClusterEvent) {
        switch change {
        case .snapshot(let snapshot):
            workers = Dictionary(snapshot.workers.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            draining = draining.intersection(workers.keys)
            queued = snapshot.totalQueued
            inFlight = snapshot.inFlight
            completed = snapshot.tasksCompleted ?? snapshot.counters.repliesSent
            failed = snapshot.tasksFailed ?? 0
            jobs = snapshot.jobs
            counters = snapshot.counters
            services = services.filter { snapshot.queued[$0.key] != nil || $0.value.completed > 0 }
            for (service, count) in snapshot.queued { services[service, default: Self.idle].queued = count }
            seq = snapshot.seq
            snapshots += 1
        case .event(let event):
            seq = event.seq
            apply(event)
        }
    }

    private mutating func apply(_ event: SkyEvent) {
        switch event.event {
        case .workerConnected:
            guard var worker = event.worker else { return }
            worker.inFlight = worker.inFlight ?? 0
            worker.completed = worker.completed ?? 0
            workers[worker.id] = worker
        case .workerDisconnected:
            guard let id = event.worker?.id else { return }
            workers[id] = nil
            draining.remove(id)
        case .workerDraining:
            if let id = event.worker?.id, workers[id] != nil { draining.insert(id) }
        case .brokerStats:
            if let stats = event.stats {
                queued = stats.queued
                inFlight = stats.inFlight
                completed = stats.completed
                failed = stats.failed ?? failed
                jobs = stats.jobs ?? jobs
                counters = stats.counters ?? counters
                services = stats.services ?? services
                tasksPerSecond = stats.completedPerSecond
            }
            for load in event.workers ?? [] where workers[load.id] != nil {
                workers[load.id] = load
            }
        default:
            break
        }
    }
}
