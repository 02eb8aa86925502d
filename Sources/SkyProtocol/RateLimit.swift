import SkyJSON

/// At most ``perSecond`` starts a second of a service's work, calls and jobs together, with
/// bursts of at most ``burst``: a token bucket that holds `burst` tokens and gains `perSecond`
/// a second; each start takes one. Set on the broker (`mmi.limits.set`, `skyctl limits set`,
/// `skybroker --rate-limit`).
///
/// With a ``key`` it is a limit *per key*: each key of the service's work (its concurrency key,
/// or the payload's ``KeyScope/field``) has a bucket of its own. A service may have one limit of
/// each kind; work then starts when both have a token.
public struct RateLimit: Codable, Sendable, Equatable {
    public var perSecond: Double
    public var burst: Int
    /// Per key, and where the key comes from; `nil`: the service as a whole.
    public var key: KeyScope?

    public init(perSecond: Double, burst: Int, key: KeyScope? = nil) {
        self.perSecond = perSecond
        self.burst = burst
        self.key = key
    }

    /// A limit per key, not on the service as a whole.
    public var isPerKey: Bool { key != nil }

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
        if let problem = key?.problem { return problem }
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

/// Where a per-key limit's key comes from: the work's concurrency key
/// (`ScanOptions.concurrencyKey`, `JobOptions.concurrencyKey`), or for work without one the
/// payload's top-level JSON field ``field``.
public struct KeyScope: Codable, Sendable, Equatable {
    /// A top-level field of the payload (a JSON object) whose value is the key of work that
    /// carries none: a string as it is, a number as its value's shortest text (`42`, `42.0` and
    /// `4.2e1` are `42`, the same key as the string `"42"`), `true` or `false`.
    public var field: String?

    public init(field: String? = nil) {
        self.field = field
    }

    /// The longest key a field's value may give: a concurrency key's bound.
    public static let maxKeyBytes = Int(UInt8.max)

    /// Why the broker cannot take this scope, if it cannot.
    public var problem: String? {
        guard let field else { return nil }
        guard !field.isEmpty, field.utf8.count <= 255, !field.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f })
        else {
            return
                "a key field must be 1...255 bytes of UTF-8 without control characters; got \(String(reflecting: field.prefix(40)))"
        }
        return nil
    }

    /// The key `body` gives through ``field``: the field's value as text, or why there is none
    /// (a sentence that says what to send instead).
    public func key(in body: [UInt8], service: String) -> Result<String, KeyFieldProblem> {
        guard let field else { return .failure(KeyFieldProblem(message: "the limit takes no field")) }
        let value: KeyFieldValue?
        do {
            value = try CanonicalJSON.decode([String: KeyFieldValue].self, from: body)[field]
        } catch {
            return .failure(
                KeyFieldProblem(
                    message:
                        "the service \(service) is rate-limited per key, taken from the payload's field \"\(field)\", and this payload is not a JSON object: give the work a concurrency key, or send a JSON object with that field"
                ))
        }
        guard case .text(let text)? = value else {
            return .failure(
                KeyFieldProblem(
                    message: value == nil
                        ? "the service \(service) is rate-limited per key, taken from the payload's field \"\(field)\", which this payload lacks: add it, or give the work a concurrency key"
                        : "the service \(service) is rate-limited per key, taken from the payload's field \"\(field)\", whose value here is not a string, a number or a boolean: give it one, or give the work a concurrency key"
                ))
        }
        // A concurrency key's rules: a key is a name.
        guard !text.isEmpty, text.utf8.count <= Self.maxKeyBytes,
            !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f })
        else {
            return .failure(
                KeyFieldProblem(
                    message:
                        "the payload's field \"\(field)\" gives a key of \(text.utf8.count) bytes; a key is 1...\(Self.maxKeyBytes) bytes without control characters (the service \(service) is rate-limited per key)"
                ))
        }
        return .success(text)
    }
}

/// Why a payload gives no key for a per-key limit (``KeyScope/key(in:service:)``).
public struct KeyFieldProblem: Error, Sendable, Equatable {
    public var message: String
}

/// A payload field's value as a key: its text for a string, number or boolean; `other` for
/// anything else (an object, an array, null).
private enum KeyFieldValue: Decodable {
    case text(String)
    case other

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let text = try? container.decode(String.self) {
            self = .text(text)
        } else if let number = try? container.decode(Int64.self) {
            self = .text(String(number))
        } else if let number = try? container.decode(Double.self) {
            self = .text(number.description)
        } else if let flag = try? container.decode(Bool.self) {
            self = .text(flag ? "true" : "false")
        } else {
            self = .other
        }
    }
}

/// The body of `mmi.limits.set`: a service and its limit (per key with ``key``).
public struct ServiceRateLimit: Codable, Sendable, Equatable {
    public var service: String
    public var perSecond: Double
    public var burst: Int
    public var key: KeyScope?

    public init(service: String, limit: RateLimit) {
        self.service = service
        perSecond = limit.perSecond
        burst = limit.burst
        key = limit.key
    }

    public var limit: RateLimit { RateLimit(perSecond: perSecond, burst: burst, key: key) }
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
    /// A limit per key, and where its key comes from; `nil`: on the service as a whole.
    public var key: KeyScope?
    /// Keys of a per-key limit whose work waits for a token now.
    public var keysWaiting: Int?
    /// Keys of a per-key limit with a bucket now (one that spent tokens not yet regained).
    public var keysTracked: Int?
    /// `set` (by `mmi.limits.set`, kept in the journal) or `flag` (the broker's
    /// `--rate-limit`; a set limit of the same service replaces it until removed).
    public var source: String
    /// Starts under the limit since the broker started.
    public var started: UInt64
    /// Calls answered at once because the limit would have made them wait past their
    /// deadline, since the broker started.
    public var refused: UInt64
    /// Work of the service waits for the limit now (for a per-key limit: work of some key).
    public var throttled: Bool

    public init(
        service: String, limit: RateLimit, source: String, started: UInt64 = 0, refused: UInt64 = 0,
        throttled: Bool = false, keysWaiting: Int? = nil, keysTracked: Int? = nil
    ) {
        self.service = service
        perSecond = limit.perSecond
        burst = limit.burst
        key = limit.key
        self.source = source
        self.started = started
        self.refused = refused
        self.throttled = throttled
        self.keysWaiting = keysWaiting
        self.keysTracked = keysTracked
    }

    public var limit: RateLimit { RateLimit(perSecond: perSecond, burst: burst, key: key) }
}
