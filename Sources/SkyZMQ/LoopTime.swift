import SkyWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A loop's time: nanoseconds since the loop started, on the clock `ContinuousClock` reads
/// (`CLOCK_BOOTTIME` on Linux), as a plain integer.
///
/// Why not `ContinuousClock.Instant`: it is a resilient type of the standard library, so every
/// copy, comparison and sum goes through its value witnesses, and its arithmetic is on
/// `Int128` attoseconds. The loop reads and compares times on every wake-up (its timers, the
/// alarm, the iteration it measures), and as instants each of those is a witness call.
public struct LoopTime: Sendable {
    /// The clock's reading when the loop started, and the same moment as an instant: what
    /// converts an instant from ``ZMQEventLoop/setAlarm(_:)`` (read a few nanoseconds apart,
    /// far below the poll's millisecond).
    let originNanoseconds: Int64
    let origin: ContinuousClock.Instant

    init() {
        origin = .now
        originNanoseconds = Self.clockNanoseconds()
    }

    /// Nanoseconds since the loop started.
    func now() -> Int64 { Self.clockNanoseconds() - originNanoseconds }

    /// An instant as nanoseconds since the loop started, below `Int64.max` (which stands for
    /// "never"): a deadline centuries away, from a caller's absurd timeout, stays a deadline
    /// that never comes, not an overflow.
    func nanoseconds(at instant: ContinuousClock.Instant) -> Int64 {
        Self.nanoseconds(origin.duration(to: instant))
    }

    func instant(at nanoseconds: Int64) -> ContinuousClock.Instant { origin + .nanoseconds(nanoseconds) }

    /// `time` plus `nanoseconds`, saturating below `Int64.max` (see ``nanoseconds(at:)``): an
    /// absurd interval or timeout is a time that never comes, not an overflow.
    static func time(_ time: Int64, plus nanoseconds: Int64) -> Int64 {
        let (sum, overflow) = time.addingReportingOverflow(nanoseconds)
        return overflow ? (nanoseconds > 0 ? .max - 1 : .min) : min(sum, .max - 1)
    }

    /// A duration in whole nanoseconds, below `Int64.max` (see ``nanoseconds(at:)``).
    static func nanoseconds(_ duration: Duration) -> Int64 {
        min(duration.wholeNanoseconds, .max - 1)
    }

    /// The clock `ContinuousClock` reads, in nanoseconds (for a caller's own origin: see
    /// ``ZMQEventLoop/setAlarm(_:after:)``).
    public static func clockNanoseconds() -> Int64 {
        var reading = timespec()
        clock_gettime(CLOCK_BOOTTIME, &reading)
        return Int64(reading.tv_sec) * 1_000_000_000 + Int64(reading.tv_nsec)
    }
}
