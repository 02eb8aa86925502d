import SkyProtocol

/// The work workers did, as `broker.stats` and snapshots report it: totals since the start,
/// and what the current stats period adds.
struct WorkTally: Sendable {
    /// Replies workers sent for tasks they held, and those of them that were not a success:
    /// the work done, which `counters.repliesSent` mixes with the broker's own answers.
    private(set) var completed: UInt64 = 0
    private(set) var failed: UInt64 = 0
    private var completedAtPeriodStart: UInt64 = 0
    /// The event loop's longest iteration this period.
    private var longestIteration: Duration = .zero
    /// The first failures this period (at most ``TaskFailure/maxPerPeriod``).
    private var failures: [TaskFailure] = []

    /// What one stats period saw.
    struct Period {
        /// Replies in the period.
        var completed: UInt64
        var longestIteration: Duration
        var failures: [TaskFailure]
    }

    /// A worker replied for a task it held.
    @inline(__always)
    mutating func replied(failed: Bool) {
        completed += 1
        if failed { self.failed += 1 }
    }

    /// Whether this period has room for one more sampled failure.
    var samplesFailures: Bool { failures.count < TaskFailure.maxPerPeriod }

    mutating func sample(_ failure: TaskFailure) {
        guard samplesFailures else { return }
        failures.append(failure)
    }

    mutating func loopIteration(took duration: Duration) {
        longestIteration = max(longestIteration, duration)
    }

    /// Ends the period: what it saw; the next starts.
    mutating func closePeriod() -> Period {
        let period = Period(
            completed: completed - completedAtPeriodStart, longestIteration: longestIteration, failures: failures)
        completedAtPeriodStart = completed
        longestIteration = .zero
        failures.removeAll(keepingCapacity: true)
        return period
    }
}
