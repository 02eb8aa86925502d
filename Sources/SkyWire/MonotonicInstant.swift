/// A moment on the clock `ContinuousClock` reads (`CLOCK_BOOTTIME` on Linux), as whole
/// nanoseconds in a plain integer: the broker's and the worker's state machines take one with
/// every input.
///
/// Why not `ContinuousClock.Instant`: it is a resilient type of the standard library (not
/// frozen), so each copy, comparison and difference goes through its value witnesses and
/// `Int128` attoseconds, and a value that holds one (a machine, an enum of states) is copied and
/// destroyed through the runtime too, its layout read from metadata. The machines read the
/// time several times a task (arrival, dispatch, reply, a broker heard from). Sums and
/// differences saturate, so an absurd interval is a time that never comes, not an overflow.
package struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    package let nanoseconds: Int64

    package init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    package static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    package static func + (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: lhs.nanoseconds.addingSaturating(nanoseconds(rhs)))
    }

    package static func - (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: lhs.nanoseconds.addingSaturating(-nanoseconds(rhs)))
    }

    /// How long after `rhs` this is (negative when before).
    package static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Duration {
        .nanoseconds(lhs.nanoseconds(since: rhs))
    }

    /// How long from this to `other` (negative when `other` is before).
    package func duration(to other: MonotonicInstant) -> Duration { other - self }

    /// `duration` in nanoseconds, saturating at `Int64.max / 2` beyond ±292 years (so that sums
    /// of a few stay in range). Through ``Swift/Duration/wholeNanoseconds``, one machine
    /// division: `components`, and `Int128`'s `/`, are software 128-bit divisions, and this runs
    /// several times per task.
    @inline(__always) package static func nanoseconds(_ duration: Duration) -> Int64 {
        let nanoseconds = duration.wholeNanoseconds
        return nanoseconds == .max || nanoseconds == .min ? Int64.max / 2 : nanoseconds
    }

    /// Nanoseconds after `other` (negative when before), without a `Duration`'s 128 bits.
    package func nanoseconds(since other: MonotonicInstant) -> Int64 {
        let (difference, overflow) = nanoseconds.subtractingReportingOverflow(other.nanoseconds)
        return overflow ? (other.nanoseconds < 0 ? .max : .min) : difference
    }

    package var description: String { "\(nanoseconds) ns" }
}

extension Int64 {
    /// The sum, held at `Int64.min` / `Int64.max` instead of overflowing.
    fileprivate func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }
}
