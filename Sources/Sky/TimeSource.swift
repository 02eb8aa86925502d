import SkyWire
import SkyZMQ

/// A clock reduced to what the client needs: time elapsed since the client started, and sleeping
/// until such a time. Wrapping any `Clock` this way lets tests hand the client a manual clock.
struct TimeSource: Sendable {
    /// Time since the source was made.
    let now: @Sendable () -> Duration
    /// Sleeps until `now()` reaches the given value; throws `CancellationError` if cancelled.
    let sleep: @Sendable (_ until: Duration) async throws -> Void
    /// When `now()` counts from, as a reading of ``LoopTime/clockNanoseconds()``, when the
    /// clock is `ContinuousClock`: then the I/O thread's own alarm can keep the client's timers.
    let continuousOrigin: Int64?

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        let origin = clock.now
        sleep = { try await clock.sleep(until: origin.advanced(by: $0.asSleep), tolerance: nil) }
        if clock is ContinuousClock {
            // The same clock read as an integer: an instant's arithmetic, through its value
            // witnesses and on Int128 attoseconds, is costly on every reading.
            let start = LoopTime.clockNanoseconds()
            now = { .nanoseconds(LoopTime.clockNanoseconds() - start) }
            continuousOrigin = start
        } else {
            now = { origin.duration(to: clock.now) }
            continuousOrigin = nil
        }
    }
}
