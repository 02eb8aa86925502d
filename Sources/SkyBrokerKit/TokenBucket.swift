import SkyProtocol

/// A service's rate limit at work: a bucket of up to `burst` tokens that gains `perSecond` a
/// second; a start takes one. Full when made (a service not yet limited had nothing to save).
/// Times are the broker's nanoseconds.
struct TokenBucket: Sendable {
    let limit: RateLimit
    private var tokens: Double
    /// When ``tokens`` was last brought up to date; `nil` until the first use (full then).
    private var updatedAt: Int64?
    private let perNanosecond: Double

    /// Within this of a whole token counts as one: the time a token is due is rounded up to
    /// the nanosecond, and the refill at that time may fall short by a rounding error.
    private static let slack = 1e-9

    init(_ limit: RateLimit, keeping old: TokenBucket? = nil, now: Int64? = nil) {
        self.limit = limit
        perNanosecond = limit.perSecond / 1e9
        tokens = Double(limit.burst)
        if var old, let now {
            // A changed limit keeps what was spent: no fresh burst for changing it.
            old.refill(now: now)
            tokens = min(old.tokens, Double(limit.burst))
            updatedAt = now
        }
    }

    private mutating func refill(now: Int64) {
        guard let updatedAt else {
            updatedAt = now
            return
        }
        guard now > updatedAt else { return }
        tokens = min(Double(limit.burst), tokens + Double(now - updatedAt) * perNanosecond)
        self.updatedAt = now
    }

    /// Whether a start may go now (a token is there), without taking it.
    mutating func hasToken(now: Int64) -> Bool {
        refill(now: now)
        return tokens >= 1 - Self.slack
    }

    /// Whether the bucket is full (the same as a new one).
    mutating func isFull(now: Int64) -> Bool {
        refill(now: now)
        return tokens >= Double(limit.burst) - Self.slack
    }

    /// Takes a token if there is one.
    mutating func take(now: Int64) -> Bool {
        guard hasToken(now: now) else { return false }
        tokens = max(0, tokens - 1)
        return true
    }

    /// When the `position`-th start from now may go (1: the next), if nothing else takes a
    /// token meanwhile.
    mutating func due(position: Int, now: Int64) -> Int64 {
        refill(now: now)
        let missing = Double(position) - tokens - Self.slack
        guard missing > 0 else { return now }
        let wait = (missing / perNanosecond).rounded(.up)
        guard wait < 9e18 else { return .max }
        let (due, overflow) = now.addingReportingOverflow(Int64(wait))
        return overflow ? .max : due
    }
}
