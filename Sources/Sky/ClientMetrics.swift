import CoreMetrics
import SkyZMQ

/// The client's metrics, through swift-metrics (to whatever backend the process bootstrapped):
/// calls by service and outcome (`ok` or the ``SkyError/Code``), attempts, call durations, and
/// calls in flight. Labels: service and outcome only. A process's clients share the series.
final class ClientMetrics: Sendable {
    private struct Handles {
        var outcomes: [String: Counter] = [:]
        let attempts: Counter
        let duration: Timer
    }

    private let handles = Locked<[String: Handles]>([:])
    private let inFlight: Meter
    /// The backend: the process's (`MetricsSystem.bootstrap`) unless the configuration names one.
    private let factory: any MetricsFactory

    /// Whether a backend listens: without one (swift-metrics' no-op default) a call pays
    /// nothing for metrics. Like swift-metrics' own handles, a client made before the process
    /// bootstraps a backend keeps the no-op one.
    let enabled: Bool

    init(factory: (any MetricsFactory)?) {
        self.factory = factory ?? MetricsSystem.factory
        enabled = !(self.factory is NOOPMetricsHandler)
        inFlight = Meter(label: "sky_client_in_flight", factory: self.factory)
    }

    /// Services given series at most (a client may be handed any name); the rest share "other".
    static let maxServices = 1000

    func started() {
        if enabled { inFlight.increment() }
    }

    func finished(_ service: String, outcome: String, attempts: Int, after duration: Duration) {
        guard enabled else { return }
        inFlight.decrement()
        let (counter, attemptCounter, timer) = handles.withLock { table in
            // Read only once the service's outcome has its counter, as after its first call: the
            // entry taken out, changed and stored back copied its dictionary of counters (the
            // table still held it) and hashed the service three times, every call.
            if let entry = table[service], let counter = entry.outcomes[outcome] {
                return (counter, entry.attempts, entry.duration)
            }
            return register(service, outcome, in: &table)
        }
        counter.increment()
        if attempts > 0 { attemptCounter.increment(by: Int64(attempts)) }
        let (seconds, attoseconds) = duration.components
        timer.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// The counter of `service`'s `outcome` (of "other" past ``maxServices``) and the service's
    /// attempts and timer, made the first time.
    private func register(
        _ service: String, _ outcome: String, in table: inout [String: Handles]
    ) -> (Counter, Counter, Timer) {
        let name = table[service] != nil || table.count < Self.maxServices ? service : "other"
        var entry =
            table[name]
            ?? Handles(
                attempts: Counter(
                    label: "sky_client_attempts_total", dimensions: [("service", name)], factory: factory),
                duration: Timer(
                    label: "sky_client_call_duration_seconds", dimensions: [("service", name)], factory: factory))
        let counter =
            entry.outcomes[outcome]
            ?? Counter(
                label: "sky_client_calls_total", dimensions: [("service", name), ("outcome", outcome)],
                factory: factory)
        entry.outcomes[outcome] = counter
        table[name] = entry
        return (counter, entry.attempts, entry.duration)
    }
}
