/// A clock reduced to what the client needs: time elapsed since the client started, and sleeping
/// until such a time. Wrapping any `Clock` this way lets tests hand the client a manual clock.
struct TimeSource: Sendable {
    /// Time since the source was made.
    let now: @Sendable () -> Duration
    /// Sleeps until `now()` reaches the given value; throws `CancellationError` if cancelled.
    let sleep: @Sendable (_ until: Duration) async throws -> Void

    init<C: Clock>(_ clock: C) where C.Duration == Duration {
        let origin = clock.now
        now = { origin.duration(to: clock.now) }
        sleep = { try await clock.sleep(until: origin.advanced(by: $0), tolerance: nil) }
    }
}
