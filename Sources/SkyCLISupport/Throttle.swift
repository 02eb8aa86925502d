/// At most one action per interval, and always one after the last change: skywatch's redraws
/// and skyweb's pushes to its pages, whatever the event rate.
public struct Throttle: Sendable {
    public let interval: Duration
    private var last: ContinuousClock.Instant
    private var scheduled = false

    public init(interval: Duration) {
        self.interval = interval
        last = .now - interval
    }

    /// A change came. Returns `.zero` to act now, a wait to act once after it (the caller
    /// schedules that one action and calls ``scheduledFired()`` then), or nil when an action is
    /// scheduled already.
    public mutating func changed(now: ContinuousClock.Instant = .now) -> Duration? {
        guard !scheduled else { return nil }
        let wait = interval - (now - last)
        guard wait > .zero else { return .zero }
        scheduled = true
        return wait
    }

    /// The scheduled action is running now.
    public mutating func scheduledFired() {
        scheduled = false
    }

    /// The action ran (scheduled or not).
    public mutating func acted(now: ContinuousClock.Instant = .now) {
        last = now
    }
}
