import HeapModule
import SkyProtocol

/// The per-key rate limits at work (``SkyProtocol/RateLimit/key``): for each service limited per
/// key, a token bucket per key, and the keys whose work waits for a token and until when.
///
/// Calls and jobs of a key share its bucket. The queues ask it deep inside their rotations
/// (``KeyTurns``): a key without a token gives up its turn (it *rests*) instead of holding the
/// others, and gets it back when its token is due (``takeDue(now:)``). It lives in the
/// ``JobBook``, whose preparation of jobs takes tokens; the broker's request queue reaches it
/// there.
///
/// A key's bucket is kept while it has spent tokens it has not regained: a full bucket is the
/// same as none, so the stats pass drops them (``dropFullBuckets(now:)``). The count is bounded
/// (``maxBuckets``); keys beyond it share one bucket per service, which can only start less.
struct KeyRateBook: Sendable {
    /// One service's per-key limit and its keys.
    struct Service: Sendable {
        var limit: RateLimit
        var buckets: [String: TokenBucket] = [:]
        /// Keys whose work waits for a token, and when it is due (nanoseconds).
        var resting: [String: Int64] = [:]
        /// Starts under the limit, and calls it answered at once, since it was set.
        var started: UInt64 = 0
        var refused: UInt64 = 0
    }

    /// A key's wake-up: valid while its key still rests until `due`. Keys due at once wake in
    /// the order they rested, so that they take their turns back in that order.
    private struct Wake: Comparable, Sendable {
        var due: Int64
        var sequence: UInt64
        var service: String
        var key: String

        static func < (lhs: Self, rhs: Self) -> Bool {
            lhs.due != rhs.due ? lhs.due < rhs.due : lhs.sequence < rhs.sequence
        }

        static func == (lhs: Self, rhs: Self) -> Bool { lhs.sequence == rhs.sequence }
    }

    /// Buckets kept at most, every service's together; beyond, new keys share their service's
    /// ``overflowKey`` bucket until full buckets are dropped.
    static let maxBuckets = 1_000_000
    /// The bucket keys share beyond ``maxBuckets`` (no key has a NUL byte: keys are names).
    static let overflowKey = "\u{0}"

    private(set) var services: [String: Service] = [:]
    private var wakes = Heap<Wake>()
    private var restings: UInt64 = 0
    private var bucketCount = 0
    /// The broker's time (nanoseconds since its epoch) at the input being handled: the queues
    /// consult buckets in paths that are not given the time.
    var now: Int64 = 0

    /// No service is limited per key (the hot path asks only this).
    var isEmpty: Bool { services.isEmpty }

    /// The per-key limit of `service`, if it has one.
    func limit(of service: String) -> RateLimit? { services[service]?.limit }

    /// Sets or lifts `service`'s per-key limit; a changed limit keeps what each key spent.
    /// - Returns: the keys that rested: the caller gives them their turns back (their dues were
    ///   the old limit's; a key still without a token rests again).
    mutating func set(_ service: String, _ limit: RateLimit?) -> [String] {
        guard let limit else {
            guard let gone = services.removeValue(forKey: service) else { return [] }
            bucketCount -= gone.buckets.count
            return Array(gone.resting.keys)
        }
        guard var entry = services[service] else {
            services[service] = Service(limit: limit)
            return []
        }
        entry.limit = limit
        for (key, bucket) in entry.buckets { entry.buckets[key] = TokenBucket(limit, keeping: bucket, now: now) }
        let rested = Array(entry.resting.keys)
        entry.resting = [:]
        services[service] = entry
        return rested
    }

    /// Whether work of `key` of `service` may start now (its token is there, not taken); if not,
    /// the key rests until its token is due. `true` for a service without a per-key limit.
    mutating func mayStart(_ service: String, key: String) -> Bool {
        guard !services.isEmpty, var entry = services.removeValue(forKey: service) else { return true }
        defer { services[service] = entry }
        let bucketKey = self.bucketKey(entry, key)
        guard isAwake(&entry, key) else { return false }
        guard entry.buckets[bucketKey]?.hasToken(now: now) ?? true else {
            rest(&entry, service: service, key: key, bucketKey: bucketKey)
            return false
        }
        return true
    }

    /// Takes a token of `key` of `service` for a start; `false` (the key rests) if there is none.
    /// `true` for a service without a per-key limit.
    mutating func take(_ service: String, key: String) -> Bool {
        guard !services.isEmpty, var entry = services.removeValue(forKey: service) else { return true }
        defer { services[service] = entry }
        let bucketKey = self.bucketKey(entry, key)
        guard isAwake(&entry, key) else { return false }
        if entry.buckets[bucketKey] == nil {
            entry.buckets[bucketKey] = TokenBucket(entry.limit)
            bucketCount += 1
        }
        guard entry.buckets[bucketKey]!.take(now: now) else {
            rest(&entry, service: service, key: key, bucketKey: bucketKey)
            return false
        }
        entry.started += 1
        return true
    }

    /// Whether `key` does not rest (a rest whose due time passed is over).
    private func isAwake(_ entry: inout Service, _ key: String) -> Bool {
        guard let due = entry.resting[key] else { return true }
        guard now >= due else { return false }
        entry.resting[key] = nil
        return true
    }

    /// `key` has no token: it rests until the next is due.
    private mutating func rest(_ entry: inout Service, service: String, key: String, bucketKey: String) {
        var bucket = entry.buckets[bucketKey] ?? TokenBucket(entry.limit)
        let due = bucket.due(position: 1, now: now)
        entry.resting[key] = due
        restings += 1
        wakes.insert(Wake(due: due, sequence: restings, service: service, key: key))
    }

    /// When the `position`-th start of `key` of `service` from now may go, if nothing else takes
    /// its tokens meanwhile; `nil` for a service without a per-key limit.
    mutating func due(_ service: String, key: String, position: Int) -> Int64? {
        guard let entry = services[service] else { return nil }
        let bucketKey = self.bucketKey(entry, key)
        var bucket = entry.buckets[bucketKey] ?? TokenBucket(entry.limit)
        return bucket.due(position: position, now: now)
    }

    /// A call of `service` was answered at once because its key's limit would have made it wait
    /// past its deadline.
    mutating func refused(_ service: String) {
        services[service]?.refused += 1
    }

    /// The bucket `key` uses: its own, or beyond ``maxBuckets`` the shared one.
    private func bucketKey(_ entry: Service, _ key: String) -> String {
        entry.buckets[key] != nil || bucketCount < Self.maxBuckets ? key : Self.overflowKey
    }

    /// When the earliest resting key's token is due, if a key rests.
    var nextWake: Int64? { wakes.min?.due }

    /// The keys whose token is due by `now`, no longer resting: their queues give them turns
    /// again.
    mutating func takeDue(now: Int64) -> [(service: String, key: String)] {
        var due: [(service: String, key: String)] = []
        while let first = wakes.min, first.due <= now {
            wakes.removeMin()
            guard services[first.service]?.resting[first.key] == first.due else { continue }
            services[first.service]!.resting[first.key] = nil
            due.append((first.service, first.key))
        }
        return due
    }

    /// Drops the buckets that are full again (the same as none; a key that rests has none full).
    mutating func dropFullBuckets(now: Int64) {
        for service in Array(services.keys) {
            var entry = services.removeValue(forKey: service)!
            for (key, var bucket) in entry.buckets where bucket.isFull(now: now) {
                entry.buckets[key] = nil
                bucketCount -= 1
            }
            services[service] = entry
        }
        if wakes.count > 1024, wakes.count > 2 * restingCount {
            wakes = Heap(wakes.unordered.filter { services[$0.service]?.resting[$0.key] == $0.due })
        }
    }

    /// Keys resting now, every service's.
    var restingCount: Int { services.values.reduce(0) { $0 + $1.resting.count } }
}
