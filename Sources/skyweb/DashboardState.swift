import SkyProtocol

/// What the page shows, as one JSON document: sent whole on every change (it is small: the
/// workers, at most 100 services and a few dozen recent lines), so that the page never has to
/// merge partial updates and a reconnecting page starts from the truth.
struct DashboardState: Encodable, Sendable {
    struct Worker: Encodable, Sendable {
        var id: String
        var name: String
        var host: String?
        var state: String
        var capacity: Int
        var running: Int
        var completed: UInt64
        var failed: UInt64
        var lastHeardMilliseconds: Int?
        var services: [String]
    }

    struct Service: Encodable, Sendable {
        var name: String
        var queued: Int
        var completedPerSecond: Double
        var p50Milliseconds: Double?
        var p99Milliseconds: Double?
        /// In the last stats period.
        var failed: UInt64
        /// Since this dashboard started watching.
        var completedTotal: UInt64
        var failedTotal: UInt64
        /// Its rate limit (`100/s, burst 20`), and whether its work waits for a token now.
        var limit: String?
        var throttled: Bool
    }

    struct Failure: Encodable, Sendable {
        /// When the broker reported it (its stats period's end), ISO 8601.
        var time: String
        var failure: TaskFailure
    }

    struct Departure: Encodable, Sendable {
        var time: String
        var name: String
        var reason: String
        var tasksHeld: Int
    }

    var broker: String
    /// False until the first snapshot, and while the broker is silent.
    var reachable: Bool
    /// When the broker was last heard, while it is reported unreachable.
    var unreachableSince: String?
    var seq: UInt64
    var queued: Int
    var inFlight: Int
    var completed: UInt64
    var failed: UInt64
    var tasksPerSecond: Double
    var workers: [Worker]
    var services: [Service]
    /// Newest first.
    var failures: [Failure]
    /// Newest first.
    var departures: [Departure]
    var jobs: JobCounts?
    /// Whether the page may cancel and retry jobs (skyweb without `--read-only`).
    var actions: Bool
}
