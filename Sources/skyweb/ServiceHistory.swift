import Foundation
import SkyProtocol

/// What the dashboard's charts draw: each service's throughput, failures, queue depth and
/// latency over the last hour, in 10-second buckets, from the broker's stats as skyweb hears
/// them (kept by skyweb, since the broker keeps only its current period). Bounded: an hour of
/// buckets for at most ``keptServices`` services, the first ones heard.
struct ServiceHistory: Sendable {
    static let bucketSeconds: Int64 = 10
    static let hour: Int64 = 3_600
    static let keptServices = 200

    /// One bucket: the tasks completed and failed in it, the queue and latencies last reported
    /// (the worst of its periods for the latencies).
    struct Bucket: Sendable, Encodable, Equatable {
        /// Its start, in seconds since 1970.
        var start: Int64
        var completed: UInt64 = 0
        var failed: UInt64 = 0
        var queued = 0
        var p50Milliseconds: Double?
        var p99Milliseconds: Double?

        mutating func add(_ stats: ServiceStats) {
            completed += stats.completed
            failed += stats.failed
            queued = stats.queued
            p50Milliseconds = Self.worse(p50Milliseconds, stats.p50Milliseconds)
            p99Milliseconds = Self.worse(p99Milliseconds, stats.p99Milliseconds)
        }

        /// Combines another service's bucket of the same start (the chart of all services).
        mutating func add(_ other: Bucket) {
            completed += other.completed
            failed += other.failed
            queued += other.queued
            p50Milliseconds = Self.worse(p50Milliseconds, other.p50Milliseconds)
            p99Milliseconds = Self.worse(p99Milliseconds, other.p99Milliseconds)
        }

        private static func worse(_ a: Double?, _ b: Double?) -> Double? {
            guard let a else { return b }
            guard let b else { return a }
            return max(a, b)
        }
    }

    /// Each service's buckets, oldest first, within the last hour.
    private var series: [String: [Bucket]] = [:]

    var services: [String] { series.keys.sorted() }

    /// Records one stats period's figures, heard at `wall`.
    mutating func record(_ services: [String: ServiceStats], at wall: Date) {
        let now = Int64(wall.timeIntervalSince1970)
        let start = now - now % Self.bucketSeconds
        for (name, stats) in services where series[name] != nil || series.count < Self.keptServices {
            var buckets = series[name, default: []]
            if buckets.last?.start != start { buckets.append(Bucket(start: start)) }
            buckets[buckets.count - 1].add(stats)
            buckets.removeAll { $0.start <= now - Self.hour }
            series[name] = buckets
        }
    }

    /// The last hour of `service` (nil: every service together), one bucket per 10 s up to
    /// `wall`, empty buckets included, so that a chart's x axis is time.
    func points(of service: String?, at wall: Date) -> [Bucket] {
        let now = Int64(wall.timeIntervalSince1970)
        let last = now - now % Self.bucketSeconds
        let first = last - Self.hour + Self.bucketSeconds
        var filled = stride(from: first, through: last, by: Int(Self.bucketSeconds)).map { Bucket(start: $0) }
        let chosen = service.map { name in series[name].map { [$0] } ?? [] } ?? Array(series.values)
        for buckets in chosen {
            for bucket in buckets where bucket.start >= first && bucket.start <= last {
                filled[Int((bucket.start - first) / Self.bucketSeconds)].add(bucket)
            }
        }
        return filled
    }
}
