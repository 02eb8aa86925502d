import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

/// The cluster as the dashboard shows it: skywatch's ``ClusterView`` plus what a page needs
/// beyond the present moment (recent failures and departures, totals per service since the
/// dashboard started) and whether the broker is reachable. A value: events in, state out.
struct DashboardModel: Sendable {
    /// Lines of history kept for the page.
    static let keptFailures = 50
    static let keptDepartures = 20
    /// Services whose totals are kept (the broker reports the 100 busiest each period).
    static let keptServices = 1000

    let broker: String
    let actions: Bool
    private(set) var view = ClusterView()
    private var silence = BrokerSilence()
    private var failures: [DashboardState.Failure] = []
    private var departures: [DashboardState.Departure] = []
    private var totals: [String: (completed: UInt64, failed: UInt64)] = [:]
    /// The services' rate limits (on the whole service, and per key), as the last
    /// `broker.stats` had them.
    private var limits: [String: RateLimitState] = [:]
    private var keyLimits: [String: RateLimitState] = [:]
    /// The last hour of each service, for the charts.
    private(set) var history = ServiceHistory()

    init(broker: String, actions: Bool) {
        self.broker = broker
        self.actions = actions
    }

    mutating func apply(_ change: ClusterEvent, at wall: Date = Date()) {
        view.apply(change)
        var isStats = false
        if case .event(let event) = change {
            let time = event.time.isEmpty ? BrokerSilence.time(wall) : event.time
            switch event.event {
            case .brokerStats:
                isStats = true
                let given = event.stats?.limits ?? []
                limits = Dictionary(
                    given.filter { !$0.limit.isPerKey }.map { ($0.service, $0) }, uniquingKeysWith: { $1 })
                keyLimits = Dictionary(
                    given.filter(\.limit.isPerKey).map { ($0.service, $0) }, uniquingKeysWith: { $1 })
                history.record(event.stats?.services ?? [:], at: wall)
                for (name, service) in event.stats?.services ?? [:]
                where totals[name] != nil || totals.count < Self.keptServices {
                    totals[name, default: (0, 0)].completed += service.completed
                    totals[name, default: (0, 0)].failed += service.failed
                }
                for failure in event.stats?.failures ?? [] {
                    failures.insert(DashboardState.Failure(time: time, failure: failure), at: 0)
                }
                if failures.count > Self.keptFailures { failures.removeLast(failures.count - Self.keptFailures) }
            case .workerDisconnected:
                guard let worker = event.worker else { break }
                departures.insert(
                    DashboardState.Departure(
                        time: time, name: worker.name, reason: event.reason?.rawValue ?? "unknown",
                        tasksHeld: event.tasksHeld ?? 0),
                    at: 0)
                if departures.count > Self.keptDepartures { departures.removeLast() }
            default:
                break
            }
        }
        silence.heard(stats: isStats)
    }

    /// Called every second; true when the broker has just been found silent.
    mutating func checkBroker() -> Bool {
        silence.check() != nil
    }

    /// A service's limits as its row shows them: `100/s, burst 20`, `per key 10/s, burst 5`.
    private static func limitText(_ whole: RateLimitState?, _ perKey: RateLimitState?) -> String? {
        var parts: [String] = []
        if let whole { parts.append("\(whole.limit.rateText), burst \(whole.burst)") }
        if let perKey {
            let field = perKey.key?.field.map { " (field \($0))" } ?? ""
            parts.append("per key\(field) \(perKey.limit.rateText), burst \(perKey.burst)")
        }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    var state: DashboardState {
        let workers = view.sortedWorkers.map { worker in
            DashboardState.Worker(
                id: worker.id, name: worker.name, host: worker.host,
                state: view.draining.contains(worker.id) ? "draining" : "ready", capacity: worker.capacity,
                running: worker.inFlight ?? 0, completed: worker.completed ?? 0, failed: worker.failed ?? 0,
                lastHeardMilliseconds: worker.lastHeardMilliseconds, services: worker.services)
        }
        let names = Set(view.services.keys).union(totals.keys).union(limits.keys).union(keyLimits.keys).sorted()
        let services = names.map { name in
            let now = view.services[name]
            let (limit, keyLimit) = (limits[name], keyLimits[name])
            return DashboardState.Service(
                name: name, queued: now?.queued ?? 0, completedPerSecond: now?.completedPerSecond ?? 0,
                p50Milliseconds: now?.p50Milliseconds, p99Milliseconds: now?.p99Milliseconds, failed: now?.failed ?? 0,
                completedTotal: totals[name]?.completed ?? 0, failedTotal: totals[name]?.failed ?? 0,
                limit: Self.limitText(limit, keyLimit),
                throttled: (limit?.throttled ?? false) || (keyLimit?.throttled ?? false))
        }
        return DashboardState(
            broker: broker, reachable: silence.lastHeard != nil && silence.unreachableSince == nil,
            unreachableSince: silence.unreachableSince.map(BrokerSilence.time), seq: view.seq, queued: view.queued,
            inFlight: view.inFlight, completed: view.completed, failed: view.failed,
            tasksPerSecond: view.tasksPerSecond, workers: workers, services: services, failures: failures,
            departures: departures, jobs: view.jobs, actions: actions)
    }
}
