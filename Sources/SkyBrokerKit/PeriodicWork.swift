import SkyWire

/// When the broker's periodic work is due: heartbeats to its workers, and `broker.stats`.
struct PeriodicWork: Sendable {
    private var nextHeartbeat: MonotonicInstant?
    private var nextStats: MonotonicInstant?

    /// Whether heartbeats go out at `now` (the first tick sends them); the next are due
    /// `interval` later.
    mutating func heartbeatsDue(now: MonotonicInstant, interval: Duration) -> Bool {
        guard now >= nextHeartbeat ?? now else { return false }
        nextHeartbeat = now + interval
        return true
    }

    /// Whether a stats period ends at `now`; the first tick starts the first period.
    mutating func statsDue(now: MonotonicInstant, interval: Duration) -> Bool {
        guard let due = nextStats else {
            nextStats = now + interval
            return false
        }
        guard now >= due else { return false }
        nextStats = now + interval
        return true
    }
}
