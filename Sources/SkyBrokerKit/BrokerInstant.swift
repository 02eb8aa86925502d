import SkyZMQ

/// A moment on the clock `ContinuousClock` reads (`CLOCK_BOOTTIME` on Linux), as whole
/// nanoseconds in a plain integer: the broker's state machine takes one with every input.
///
/// Why not `ContinuousClock.Instant`: it is a resilient type of the standard library, so each
/// copy, comparison and difference goes through its value witnesses and `Int128` attoseconds;
/// the machine reads the time several times a task (arrival, dispatch, reply, a worker's
/// `lastHeard`), and as instants every one of those is a witness call. Sums and differences
/// saturate, so an absurd interval is a time that never comes, not an overflow.
package struct BrokerInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    package let nanoseconds: Int64

    package init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The clock's reading now.
    package static var now: BrokerInstant { BrokerInstant(nanoseconds: LoopTime.clockNanoseconds()) }

    package static func < (lhs: BrokerInstant, rhs: BrokerInstant) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    package static func + (lhs: BrokerInstant, rhs: Duration) -> BrokerInstant {
        BrokerInstant(nanoseconds: lhs.nanoseconds.addingSaturating(BrokerStateMachine.nanoseconds(rhs)))
    }

    package static func - (lhs: BrokerInstant, rhs: Duration) -> BrokerInstant {
        BrokerInstant(nanoseconds: lhs.nanoseconds.addingSaturating(-BrokerStateMachine.nanoseconds(rhs)))
    }

    /// How long after `rhs` this is (negative when before).
    package static func - (lhs: BrokerInstant, rhs: BrokerInstant) -> Duration {
        .nanoseconds(lhs.nanoseconds(since: rhs))
    }

    /// Nanoseconds after `other` (negative when before), without a `Duration`'s 128 bits.
    package func nanoseconds(since other: BrokerInstant) -> Int64 {
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
