import CoreMetrics
import SkyProtocol
import SkyZMQ

/// The worker's metrics, through swift-metrics (skyworker's `--metrics` serves them): tasks by
/// service and outcome, handler durations, and the handlers running now. Labels: service and
/// outcome (a reply status); the services are the worker's own, registered at start.
final class WorkerMetrics: Sendable {
    private struct Handles {
        var outcomes: [ReplyStatus: Counter] = [:]
        let duration: Timer
    }

    private let handles = Locked<[String: Handles]>([:])
    private let running = Meter(label: "sky_worker_running")

    init(capacity: Int) {
        Gauge(label: "sky_worker_capacity").record(capacity)
    }

    /// Whether a backend listens (see `ClientMetrics`): without one a task pays nothing here.
    private let enabled = !(MetricsSystem.factory is NOOPMetricsHandler)

    /// A handler starts: when, as the clock's nanoseconds, or 0 without a backend, which spares
    /// the task both readings of the clock. A plain integer: an optional
    /// `ContinuousClock.Instant`, a resilient type, went through the runtime's generic witnesses
    /// and cost as much as the clock.
    func started() -> Int64 {
        guard enabled else { return 0 }
        running.increment()
        return LoopTime.clockNanoseconds()
    }

    /// A handler of `service` that ``started()`` at `start` ended with `status`.
    func finished(_ service: String, _ status: ReplyStatus, startedAt start: Int64) {
        guard enabled else { return }
        let nanoseconds = LoopTime.clockNanoseconds() - start
        running.decrement()
        let (counter, timer) = handles.withLock { table in
            // Read only once the service's outcome has its counter, as after its first task: the
            // entry taken out, changed and stored back copied its dictionary of counters (the
            // table still held it) and hashed the service twice, every task.
            if let entry = table[service], let counter = entry.outcomes[status] { return (counter, entry.duration) }
            return Self.register(service, status, in: &table)
        }
        counter.increment()
        timer.recordNanoseconds(nanoseconds)
    }

    /// The counter of `service`'s `status`, and the service's timer, made the first time.
    private static func register(
        _ service: String, _ status: ReplyStatus, in table: inout [String: Handles]
    ) -> (Counter, Timer) {
        let duration =
            table[service]?.duration
            ?? Timer(label: "sky_worker_handler_duration_seconds", dimensions: [("service", service)])
        let counter = Counter(
            label: "sky_worker_tasks_total", dimensions: [("service", service), ("outcome", status.description)])
        table[service, default: Handles(duration: duration)].outcomes[status] = counter
        return (counter, duration)
    }
}
