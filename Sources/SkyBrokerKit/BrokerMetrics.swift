import CoreMetrics
import SkyProtocol

/// The broker's metrics, through swift-metrics: whatever backend the process bootstrapped
/// (skybroker's `--metrics` serves Prometheus's text format), or none.
///
/// Updated once per stats period from what the state machine publishes then (`broker.stats` and
/// its services' latency windows), never per message: the I/O thread pays one pass over the
/// period's services a second. Labels have bounded cardinality: service names (at most
/// ``ServiceStats/maxServices`` a period, ``maxServices`` ever), statuses and job events; never
/// request ids or peers.
struct BrokerMetrics: Sendable {
    /// Services given series at most; later ones are left out (and counted in the log).
    static let maxServices = 1000

    private var known: Set<String> = []
    private var lastJobs: JobCounts?
    private var lastCommits = 0
    private var lastCounters: BrokerCounters?
    /// Each limit's starts and refusals at the last record, for the counters' steps.
    private var lastLimits: [LimitSeries: (started: UInt64, refused: UInt64)] = [:]

    /// A limit's series: its service, and `per` `service` or `key`.
    private struct LimitSeries: Hashable {
        var service: String
        var perKey: Bool

        var dimensions: [(String, String)] { [("service", service), ("per", perKey ? "key" : "service")] }
    }

    /// - Parameter journalCommits: the journal's transactions so far, with a journal.
    mutating func record(_ stats: BrokerStats, journalCommits: Int?) {
        if let journalCommits, journalCommits > lastCommits {
            Counter(label: "sky_broker_journal_commits_total").increment(by: Int64(journalCommits - lastCommits))
            lastCommits = journalCommits
        }
        if let counters = stats.counters {
            let before = Dictionary(lastCounters?.drops ?? [], uniquingKeysWith: { $1 })
            for (reason, count) in counters.drops where count > before[reason] ?? 0 {
                Counter(label: "sky_broker_dropped_messages_total", dimensions: [("reason", reason)])
                    .increment(by: Int64(clamping: count - (before[reason] ?? 0)))
            }
            lastCounters = counters
        }
        Gauge(label: "sky_broker_workers").record(stats.workers)
        Gauge(label: "sky_broker_capacity").record(stats.capacity)
        Gauge(label: "sky_broker_in_flight").record(stats.inFlight)
        Gauge(label: "sky_broker_queued_bytes").record(stats.queuedBytes ?? 0)
        Gauge(label: "sky_broker_loop_iteration_max_seconds").record(
            (stats.longestIterationMilliseconds ?? 0) / 1000)
        let services = stats.services ?? [:]
        for (service, figures) in services where admit(service) {
            let dimensions = [("service", service)]
            Gauge(label: "sky_broker_queue_depth", dimensions: dimensions).record(figures.queued)
            Gauge(label: "sky_broker_service_queued_bytes", dimensions: dimensions).record(figures.queuedBytes ?? 0)
        }
        // A service no longer reported has nothing waiting.
        for service in known where services[service] == nil {
            Gauge(label: "sky_broker_queue_depth", dimensions: [("service", service)]).record(0)
            Gauge(label: "sky_broker_service_queued_bytes", dimensions: [("service", service)]).record(0)
        }
        // A limit removed: its gauges say so (a series left at its last value reads as a limit).
        let limited = Set((stats.limits ?? []).map { LimitSeries(service: $0.service, perKey: $0.limit.isPerKey) })
        for series in lastLimits.keys where !limited.contains(series) {
            Gauge(label: "sky_broker_rate_limit_per_second", dimensions: series.dimensions).record(0)
            Gauge(label: "sky_broker_rate_limit_throttled", dimensions: series.dimensions).record(0)
            if series.perKey {
                Gauge(label: "sky_broker_rate_limit_keys_waiting", dimensions: series.dimensions).record(0)
            }
            lastLimits[series] = nil
        }
        for limit in stats.limits ?? [] where admit(limit.service) {
            let series = LimitSeries(service: limit.service, perKey: limit.limit.isPerKey)
            let dimensions = series.dimensions
            Gauge(label: "sky_broker_rate_limit_per_second", dimensions: dimensions).record(limit.perSecond)
            Gauge(label: "sky_broker_rate_limit_throttled", dimensions: dimensions).record(limit.throttled ? 1 : 0)
            if series.perKey {
                Gauge(label: "sky_broker_rate_limit_keys_waiting", dimensions: dimensions).record(
                    limit.keysWaiting ?? 0)
            }
            // A limit removed and set again counts from 0 again.
            let (started, refused) = lastLimits[series] ?? (0, 0)
            let newStarts = limit.started >= started ? limit.started - started : limit.started
            let newRefusals = limit.refused >= refused ? limit.refused - refused : limit.refused
            if newStarts > 0 {
                Counter(label: "sky_broker_rate_limited_starts_total", dimensions: dimensions)
                    .increment(by: Int64(clamping: newStarts))
            }
            if newRefusals > 0 {
                Counter(label: "sky_broker_rate_limit_refused_total", dimensions: dimensions)
                    .increment(by: Int64(clamping: newRefusals))
            }
            lastLimits[series] = (limit.started, limit.refused)
        }
        if let jobs = stats.jobs {
            Gauge(label: "sky_broker_jobs", dimensions: [("state", "held")]).record(jobs.held)
            Gauge(label: "sky_broker_jobs", dimensions: [("state", "queued")]).record(jobs.queued)
            Gauge(label: "sky_broker_journal_bytes").record(jobs.journalBytes)
            let last = lastJobs
            Gauge(label: "sky_broker_journal_failing").record(jobs.journalFailing == true ? 1 : 0)
            if let failures = jobs.journalFailures, failures > last?.journalFailures ?? 0 {
                Counter(label: "sky_broker_journal_failures_total")
                    .increment(by: Int64(clamping: failures - (last?.journalFailures ?? 0)))
            }
            for (event, now, before) in [
                ("submitted", jobs.submitted, last?.submitted), ("succeeded", jobs.succeeded, last?.succeeded),
                ("failed", jobs.failed, last?.failed), ("cancelled", jobs.cancelled, last?.cancelled),
                ("retried", jobs.retried, last?.retried),
            ] where now > before ?? 0 {
                Counter(label: "sky_broker_jobs_total", dimensions: [("event", event)])
                    .increment(by: Int64(clamping: now - (before ?? 0)))
            }
            if let schedules = jobs.schedules {
                Gauge(label: "sky_broker_schedules", dimensions: [("state", "active")])
                    .record(schedules.count - schedules.paused)
                Gauge(label: "sky_broker_schedules", dimensions: [("state", "paused")]).record(schedules.paused)
                let before = last?.schedules
                for (outcome, now, then) in [
                    ("fired", schedules.fired, before?.fired), ("skipped", schedules.skipped, before?.skipped),
                ] where now > then ?? 0 {
                    Counter(label: "sky_broker_schedule_ticks_total", dimensions: [("outcome", outcome)])
                        .increment(by: Int64(clamping: now - (then ?? 0)))
                }
            }
            if let flows = jobs.flows {
                Gauge(label: "sky_broker_flows").record(flows.held)
                let before = last?.flows
                for (outcome, now, then) in [
                    ("succeeded", flows.succeeded, before?.succeeded), ("failed", flows.failed, before?.failed),
                    ("cancelled", flows.cancelled, before?.cancelled),
                ] where now > then ?? 0 {
                    Counter(label: "sky_broker_flows_total", dimensions: [("outcome", outcome)])
                        .increment(by: Int64(clamping: now - (then ?? 0)))
                }
            }
            lastJobs = jobs
        }
    }

    /// The period's answers per service and status, their latencies (arrival at the broker to
    /// the reply) and the requests' waits for a worker (arrival to dispatch): each histogram
    /// bucket's count recorded at its upper bound.
    mutating func record(_ windows: [String: ServiceWindow]) {
        for (service, window) in windows where admit(service) {
            for (slot, count) in window.statuses.enumerated() where count > 0 {
                let status = ReplyStatus(rawValue: UInt8(slot))?.description ?? "unknown"
                Counter(label: "sky_broker_tasks_total", dimensions: [("service", service), ("status", status)])
                    .increment(by: Int64(clamping: count))
            }
            Self.record(
                window.buckets, Timer(label: "sky_broker_task_duration_seconds", dimensions: [("service", service)]))
            Self.record(
                window.waitBuckets,
                Timer(label: "sky_broker_dispatch_wait_seconds", dimensions: [("service", service)]))
        }
    }

    private static func record(_ buckets: [UInt32], _ timer: Timer) {
        for (bucket, count) in buckets.enumerated() where count > 0 {
            let nanoseconds = Int64(ServiceWindow.upperBoundNanoseconds(bucket))
            for _ in 0..<count { timer.recordNanoseconds(nanoseconds) }
        }
    }

    private mutating func admit(_ service: String) -> Bool {
        if known.contains(service) { return true }
        guard known.count < Self.maxServices else { return false }
        known.insert(service)
        return true
    }
}
