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

    /// Whether a backend listens (see `ClientMetrics`): without one a task pays nothing here,
    /// and callers skip reading the clock for ``finished(_:_:after:)``.
    let enabled = !(MetricsSystem.factory is NOOPMetricsHandler)

    func started() {
        if enabled { running.increment() }
    }

    /// A handler of `service` ended with `status` after `duration`.
    func finished(_ service: String, _ status: ReplyStatus, after duration: Duration) {
        guard enabled else { return }
        running.decrement()
        let (counter, timer) = handles.withLock { table in
            var entry =
                table[service]
                ?? Handles(
                    duration: Timer(label: "sky_worker_handler_duration_seconds", dimensions: [("service", service)]))
            let counter =
                entry.outcomes[status]
                ?? Counter(
                    label: "sky_worker_tasks_total",
                    dimensions: [("service", service), ("outcome", status.description)])
            entry.outcomes[status] = counter
            table[service] = entry
            return (counter, entry.duration)
        }
        counter.increment()
        let (seconds, attoseconds) = duration.components
        timer.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
