import CoreMetrics
import Prometheus

/// swift-prometheus's factory, with a `# HELP` line for every series Sky emits (promtool and
/// Prometheus's tooling ask for one). The libraries only name their metrics; what each means is
/// written once, here, and in docs/operations.md.
struct SkyMetricsFactory: MetricsFactory {
    let registry: PrometheusCollectorRegistry
    /// Unregisters handlers, and holds the default histogram buckets.
    private let prometheus: PrometheusMetricsFactory

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        prometheus = PrometheusMetricsFactory(registry: registry)
    }

    static let help: [String: String] = [
        "sky_broker_tasks_total":
            "Tasks answered by the broker's workers or by the broker itself, by service and status (ok or failed).",
        "sky_broker_task_duration_seconds":
            "Time from a request's arrival at the broker to its worker's reply, by service.",
        "sky_broker_queue_depth": "Requests waiting for a worker, by service.",
        "sky_broker_queued_bytes": "Bytes of request bodies waiting for a worker.",
        "sky_broker_workers": "Workers connected.",
        "sky_broker_capacity": "Credits over all connected workers.",
        "sky_broker_in_flight": "Tasks at workers.",
        "sky_broker_loop_iteration_max_seconds": "The broker's longest event-loop iteration in the last stats period.",
        "sky_broker_jobs":
            "Durable jobs the broker holds unfinished (held), and of those the ones waiting for a worker (queued).",
        "sky_broker_jobs_total": "Durable-job events recorded: submitted, succeeded, failed, cancelled, retried.",
        "sky_broker_journal_bytes": "The job journal's size on disk.",
        "sky_broker_journal_commits_total": "Transactions the job journal committed (each one fsync'd).",
        "sky_broker_journal_failing":
            "1 while the job journal's last write failed (a full disk, a store out of reach), else 0.",
        "sky_broker_journal_failures_total": "Job journal writes that failed since the broker started.",
        "sky_worker_tasks_total": "Tasks this worker's handlers finished, by service and outcome (a reply status).",
        "sky_worker_handler_duration_seconds": "Time a handler ran, by service.",
        "sky_worker_running": "Handlers running now.",
        "sky_worker_capacity": "Tasks this worker runs at once (its credits).",
        "sky_client_calls_total": "Calls finished, by service and outcome (ok, or the SkyError code).",
        "sky_client_attempts_total": "Attempts the finished calls took, by service.",
        "sky_client_call_duration_seconds": "Time a call took, all attempts included, by service.",
        "sky_client_in_flight": "Calls in flight.",
    ]

    private func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: Self.help[label] ?? "Sky metric \(label).")
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: descriptor(label), labels: dimensions)
    }

    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        guard aggregate else { return registry.makeGauge(descriptor: descriptor(label), labels: dimensions) }
        return registry.makeValueHistogram(
            descriptor: descriptor(label), labels: dimensions, buckets: prometheus.defaultValueHistogramBuckets)
    }

    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: descriptor(label), labels: dimensions)
    }

    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        registry.makeDurationHistogram(
            descriptor: descriptor(label), labels: dimensions, buckets: prometheus.defaultDurationHistogramBuckets)
    }

    func destroyCounter(_ handler: any CounterHandler) { prometheus.destroyCounter(handler) }
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {
        prometheus.destroyFloatingPointCounter(handler)
    }
    func destroyRecorder(_ handler: any RecorderHandler) { prometheus.destroyRecorder(handler) }
    func destroyMeter(_ handler: any MeterHandler) { prometheus.destroyMeter(handler) }
    func destroyTimer(_ handler: any TimerHandler) { prometheus.destroyTimer(handler) }
}
