/// At most ``perSecond`` starts a second of a service's work, calls and jobs together, with
/// bursts of at most ``burst``: a token bucket that holds `burst` tokens and gains `perSecond`
/// a second; each start takes one. Set on the broker (`mmi.limits.set`, `skyctl limits set`,
/// `skybroker --rate-limit`).
public struct RateLimit: Codable, Sendable, Equatable {
    public var perSecond: Double
    public var burst: Int

    public init(perSecond: Double, burst: Int) {
        self.perSecond = perSecond
        self.burst = burst
    }

    /// The fastest rate a limit may have.
    public static let maxPerSecond = 1_000_000.0
    /// The slowest: one start a day.
    public static let minPerSecond = 1.0 / 86_400
    /// The largest burst.
    public static let maxBurst = 1_000_000
    /// The broker starts limited work at least this long apart (nanoseconds): a burst must
    /// cover a rate's starts in that time, or the rate could not be reached.
    public static let wakeNanoseconds: Int64 = 1_000_000

    /// Why the broker cannot keep this limit, if it cannot: every problem in one sentence
    /// that says what to give instead.
    public var problem: String? {
        guard perSecond.isFinite, perSecond >= Self.minPerSecond, perSecond <= Self.maxPerSecond else {
            return
                "a rate must be between 1/d (one start a day) and \(Int(Self.maxPerSecond))/s; got \(Self.describe(perSecond))"
        }
        guard burst >= 1, burst <= Self.maxBurst else {
            return "a burst must be between 1 and \(Self.maxBurst) starts; got \(burst)"
        }
        let least = Self.leastBurst(perSecond)
        guard burst >= least else {
            return
                "a burst of \(burst) cannot keep \(rateText): the broker starts limited work at most every millisecond, so give a burst of at least \(least)"
        }
        return nil
    }

    /// The smallest burst that keeps `perSecond` (its starts in one wake-up interval).
    public static func leastBurst(_ perSecond: Double) -> Int {
        guard perSecond.isFinite, perSecond > 0 else { return 1 }
        return max(1, Int(min(perSecond * Double(wakeNanoseconds) / 1e9, Double(maxBurst)).rounded(.up)))
    }

    /// The burst given when none is: a second's worth of starts (at least 1, and at least
    /// ``leastBurst(_:)``).
    public static func defaultBurst(_ perSecond: Double) -> Int {
        guard perSecond.isFinite, perSecond > 0 else { return 1 }
        return min(maxBurst, max(leastBurst(perSecond), Int(min(perSecond, Double(maxBurst)).rounded(.up))))
    }

    /// The rate as `skyctl` and the broker's flag write it: `100/s`, `30/m`, `2/h`, `1/d`,
    /// whichever unit gives a whole number, else per second.
    public var rateText: String { Self.describe(perSecond) }

    private static func describe(_ perSecond: Double) -> String {
        guard perSecond.isFinite, perSecond > 0 else { return "\(perSecond)/s" }
        for (unit, seconds) in [("s", 1.0), ("m", 60), ("h", 3600), ("d", 86_400)] {
            let count = perSecond * seconds
            if count >= 1, count < 1e15, abs(count - count.rounded()) < 1e-9 * count {
                return "\(Int(count.rounded()))/\(unit)"
            }
        }
        return "\(perSecond)/s"
    }

    /// Reads a rate: `100/s`, `30/m`, `2/h`, `1/d` or a plain number of starts a second.
    /// - Returns: starts a second; `nil` for anything else (then say what is taken).
    public static func parseRate(_ text: String) -> Double? {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        // Decimal only: `Double` also reads `0x10`, `nan` and `inf`.
        guard parts[0].allSatisfy({ $0.isASCII && ($0.isNumber || "+-.eE".contains($0)) }),
            let count = Double(parts[0]), count.isFinite
        else { return nil }
        guard parts.count == 2 else { return count }
        switch parts[1] {
        case "s", "sec", "second": return count
        case "m", "min", "minute": return count / 60
        case "h", "hour": return count / 3600
        case "d", "day": return count / 86_400
        default: return nil
        }
    }
}

/// The body of `mmi.limits.set`: a service and its limit.
public struct ServiceRateLimit: Codable, Sendable, Equatable {
    public var service: String
    public var perSecond: Double
    public var burst: Int

    public init(service: String, limit: RateLimit) {
        self.service = service
        perSecond = limit.perSecond
        burst = limit.burst
    }

    public var limit: RateLimit { RateLimit(perSecond: perSecond, burst: burst) }
}

/// The answer to `mmi.limits.list`: every limited service, by name.
public struct RateLimitListing: Codable, Sendable, Equatable {
    public var limits: [RateLimitState]

    public init(limits: [RateLimitState]) {
        self.limits = limits
    }
}

/// One service's rate limit as `mmi.limits.list` shows it.
public struct RateLimitState: Codable, Sendable, Equatable {
    public var service: String
    public var perSecond: Double
    public var burst: Int
    /// `set` (by `mmi.limits.set`, kept in the journal) or `flag` (the broker's
    /// `--rate-limit`; a set limit of the same service replaces it until removed).
    public var source: String
    /// Starts under the limit since the broker started.
    public var started: UInt64
    /// Calls answered at once because the limit would have made them wait past their
    /// deadline, since the broker started.
    public var refused: UInt64
    /// Work of the service waits for the limit now.
    public var throttled: Bool

    public init(
        service: String, limit: RateLimit, source: String, started: UInt64 = 0, refused: UInt64 = 0,
        throttled: Bool = false
    ) {
        self.service = service
        perSecond = limit.perSecond
        burst = limit.burst
        self.source = source
        self.started = started
        self.refused = refused
        self.throttled = throttled
    }

    public var limit: RateLimit { RateLimit(perSecond: perSecond, burst: burst) }
}
