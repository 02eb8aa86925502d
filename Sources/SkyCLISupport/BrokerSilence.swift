import Foundation

/// Tells a watcher when the broker has gone quiet: silent for three of its stats periods (at
/// least 3 s), it is reported unreachable since it was last heard, instead of figures that only
/// look stale. skywatch and skyweb share it so that both say the same thing at the same time.
public struct BrokerSilence: Sendable {
    /// When the last snapshot or event came, by this process's clocks.
    public private(set) var lastHeard: (at: ContinuousClock.Instant, wall: Date)?
    /// The broker's stats period as seen between its last two `broker.stats` events.
    private var statsPeriod = Duration.seconds(1)
    private var lastStats: ContinuousClock.Instant?
    /// Set while the broker is silent: when it was last heard.
    public private(set) var unreachableSince: Date?

    public init() {}

    /// Something came from the broker. Returns true when it had been reported unreachable.
    @discardableResult
    public mutating func heard(stats: Bool, at now: ContinuousClock.Instant = .now, wall: Date = Date()) -> Bool {
        lastHeard = (now, wall)
        if stats {
            if let previous = lastStats { statsPeriod = now - previous }
            lastStats = now
        }
        defer { unreachableSince = nil }
        return unreachableSince != nil
    }

    /// Checks the silence so far. Returns how long it lasted when it has just become too long.
    public mutating func check(at now: ContinuousClock.Instant = .now) -> Duration? {
        guard let lastHeard, unreachableSince == nil else { return nil }
        let silence = now - lastHeard.at
        guard silence > max(.seconds(3), statsPeriod * 3) else { return nil }
        unreachableSince = lastHeard.wall
        return silence
    }

    /// A date as watchers print it: ISO 8601, UTC, to the second.
    public static func time(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }
}
