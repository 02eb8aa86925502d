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
        timer.recordNanoseconds(nanoseconds)
    }
}
