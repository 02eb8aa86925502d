import SkyProtocol

/// The broker's rate limits besides their buckets (which live with their services, where
/// dispatch looks, and per key in the ``KeyRateBook``): where each limit comes from, and which
/// services' work waits for a token and until when. A service may have a limit on the whole
/// service and one per key, each set or flagged.
struct RateLimitBook: Sendable {
    /// Limits set through `mmi.limits.set` (kept in the journal), by service.
    private(set) var set: [String: RateLimit] = [:]
    /// Per-key limits set through `mmi.limits.set`, by service.
    private(set) var keySet: [String: RateLimit] = [:]
    /// Limits the broker's flag gives (``BrokerRouting/rateLimits``).
    var flagged: [String: RateLimit] = [:] {
        didSet { sortedNames = nil }
    }
    /// Per-key limits the broker's flag gives (``BrokerRouting/keyRateLimits``).
    var keyFlagged: [String: RateLimit] = [:] {
        didSet { sortedNames = nil }
    }
    /// Every limited service's name, sorted: kept between changes (the stats list them every
    /// second, and sorting thousands of names each time showed in the loop's longest
    /// iteration).
    private var sortedNames: [String]?
    /// Services whose work waits for a token, and when the next one is due (nanoseconds).
    private(set) var throttled: [ServiceBook.Number: Int64] = [:]
    /// When the last wake-up for tokens was: the next is at least
    /// ``RateLimit/wakeNanoseconds`` later.
    private var lastWake: Int64 = .min

    /// The limit that applies to `name` (per key, or on the whole service), and where it comes
    /// from (`set` or `flag`).
    func effective(_ name: String, perKey: Bool = false) -> (limit: RateLimit, source: String)? {
        if let limit = perKey ? keySet[name] : set[name] { return (limit, "set") }
        return (perKey ? keyFlagged[name] : flagged[name]).map { ($0, "flag") }
    }

    /// The limit set for `name` of one kind.
    func setLimit(_ name: String, perKey: Bool) -> RateLimit? { perKey ? keySet[name] : set[name] }

    /// Limits set, of both kinds (each is a row in the journal).
    var setCount: Int { self.set.count + keySet.count }

    /// The journal's name for a limit: the service's, with a suffix for a per-key limit (no
    /// service name has a control character, so the two never meet).
    static func journalName(_ service: String, perKey: Bool) -> String {
        perKey ? service + journalKeySuffix : service
    }

    /// The suffix of a per-key limit's name in the journal.
    static let journalKeySuffix = "\u{1F}key"

    /// Every limited service's name, sorted.
    var names: [String] {
        mutating get {
            if let sortedNames { return sortedNames }
            let names = Set(set.keys).union(flagged.keys).union(keySet.keys).union(keyFlagged.keys).sorted()
            sortedNames = names
            return names
        }
    }

    /// Sets or removes the limit set for `name` of one kind; returns the one it replaced.
    @discardableResult
    mutating func set(_ name: String, _ limit: RateLimit?, perKey: Bool = false) -> RateLimit? {
        sortedNames = nil
        if perKey {
            return if let limit { keySet.updateValue(limit, forKey: name) } else { keySet.removeValue(forKey: name) }
        }
        return if let limit { set.updateValue(limit, forKey: name) } else { set.removeValue(forKey: name) }
    }

    /// `service`'s work waits for a token, due at `due`.
    mutating func throttle(_ service: ServiceBook.Number, until due: Int64) {
        if let known = throttled[service], known <= due { return }
        throttled[service] = due
    }

    /// Takes `service` out of the waiting ones (its limit changed or went).
    mutating func unthrottle(_ service: ServiceBook.Number) {
        throttled[service] = nil
    }

    /// When the broker should next wake up for tokens, if any service waits for one.
    var nextWake: Int64? {
        guard !throttled.isEmpty, let due = throttled.values.min() else { return nil }
        let (earliest, overflow) = lastWake.addingReportingOverflow(RateLimit.wakeNanoseconds)
        return overflow ? due : max(due, earliest)
    }

    /// The services whose token is due by `now`, taken out of the waiting ones.
    mutating func takeDue(now: Int64) -> [ServiceBook.Number] {
        guard !throttled.isEmpty else { return [] }
        let due = throttled.filter { $0.value <= now }.map(\.key)
        guard !due.isEmpty else { return [] }
        lastWake = now
        for service in due { throttled[service] = nil }
        return due
    }
}
