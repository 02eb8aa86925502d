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
///
/// Services are kept in slots: a queue's lane remembers its service's slot
/// (``slot(_:name:)``), so that the hot path finds it without hashing the name.
struct KeyRateBook: Sendable {
    /// One service's per-key limit and its keys.
    struct Service: Sendable {
        let name: String
        var limit: RateLimit
        /// Entries added and removed only in ``check(_:now:shared:taking:)``,
        /// ``dropFullBuckets(now:)`` and ``change(to:now:)``, which tell ``bucketLookup``.
        private(set) var buckets: [String: TokenBucket] = [:]
        /// The bucket the last lookup found: a call's key is looked up when its lane asks
        /// whether it may start and again when it takes the token.
        private var bucketLookup = LastLookup<String, TokenBucket>()
        /// Keys whose work waits for a token, and when it is due (nanoseconds).
        var resting: [String: Int64] = [:]
        /// Starts under the limit, and calls it answered at once, since it was set.
        var started: UInt64 = 0
        var refused: UInt64 = 0

        init(name: String, limit: RateLimit) {
            self.name = name
            self.limit = limit
        }

        /// The key of the bucket `key` uses: its own, or when buckets are `shared` (beyond
        /// ``KeyRateBook/maxBuckets``) and it has none, the shared one.
        func bucketKey(_ key: String, shared: Bool) -> String {
            !shared || buckets[key] != nil ? key : KeyRateBook.overflowKey
        }

        /// A new limit, keeping what each key spent.
        /// - Returns: the keys that rested (they look again).
        mutating func change(to limit: RateLimit, now: Int64) -> [String] {
            self.limit = limit
            bucketLookup.changed()
            for (key, bucket) in buckets { buckets[key] = TokenBucket(limit, keeping: bucket, now: now) }
            let rested = Array(resting.keys)
            resting = [:]
            return rested
        }

        /// Drops the buckets that are full again; returns how many.
        mutating func dropFullBuckets(now: Int64) -> Int {
            let before = buckets.count
            bucketLookup.changed()
            buckets = buckets.filter { _, bucket in
                var bucket = bucket
                return !bucket.isFull(now: now)
            }
            return before - buckets.count
        }

        /// When the `position`-th start of `key` from `now` may go.
        mutating func due(_ key: String, position: Int, now: Int64, shared: Bool) -> Int64 {
            let bucketKey = bucketKey(key, shared: shared)
            guard buckets[bucketKey] != nil else {
                var fresh = TokenBucket(limit)
                return fresh.due(position: position, now: now)
            }
            return buckets[bucketKey]!.due(position: position, now: now)
        }

        /// Whether work of `key` may start at `now`, its token taken if `taking`; a key without
        /// one rests until its next is due.
        /// - Returns: that, when the key now rests until (if it began to), and the buckets made.
        mutating func check(
            _ key: String, now: Int64, shared: Bool, taking: Bool
        ) -> (may: Bool, restsUntil: Int64?, added: Int) {
            if !resting.isEmpty, let due = resting[key] {
                guard now >= due else { return (false, nil, 0) }
                resting[key] = nil
            }
            // By index: `buckets[key]?.take(…)` went through the dictionary's modify coroutine,
            // which allocated its frame on every call.
            let bucketKey = bucketKey(key, shared: shared)
            var added = 0
            var index = bucketLookup.index(of: bucketKey, in: buckets)
            if index == nil, taking {
                bucketLookup.changed()
                buckets[bucketKey] = TokenBucket(limit)
                index = bucketLookup.index(of: bucketKey, in: buckets)
                added = 1
            }
            guard let index else { return (true, nil, 0) }  // no bucket: a full one
            let has = taking ? buckets.values[index].take(now: now) : buckets.values[index].hasToken(now: now)
            if has {
                if taking { started += 1 }
                return (true, nil, added)
            }
            let due = buckets.values[index].due(position: 1, now: now)
            resting[key] = due
            return (false, due, added)
        }
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

    /// The limited services by slot; a free slot's entry has no name.
    /// (Not optional: changing a field of an optional element copied the whole entry.)
    private var entries: [Service] = []
    /// Each slot's service name ("": free) and limit, apart from its entry: reading an entry
    /// out of the array copies its tables (retained and released), and the hot path reads these.
    private var names: [String] = []
    private var limits: [RateLimit?] = []
    private var slots: [String: Int] = [:]
    private var wakes = Heap<Wake>()
    private var restings: UInt64 = 0
    private var bucketCount = 0
    /// The broker's time (nanoseconds since its epoch) at the input being handled: the queues
    /// consult buckets in paths that are not given the time.
    var now: Int64 = 0

    /// No service is limited per key (the hot path asks only this).
    var isEmpty: Bool { slots.isEmpty }

    /// `service`'s entry, if it is limited per key.
    func entry(_ service: String) -> Service? { slots[service].map { entries[$0] } }

    /// The per-key limit of `service`, if it has one.
    func limit(of service: String) -> RateLimit? { slots[service].flatMap { limits[$0] } }

    /// The slot of `service`, if it is limited per key (its name looked up once for a request
    /// that will need its limit and its bucket).
    func slot(of service: String) -> Int? { slots[service] }

    /// The limit of the service in `slot`.
    func limit(at slot: Int) -> RateLimit? { limits[slot] }

    /// The slot of `service` (`nil`: it has no per-key limit), checked against the one `cached`
    /// and remembered there.
    func slot(_ cached: inout Int, name: String) -> Int? {
        if cached >= 0, cached < names.count, names[cached] == name { return cached }
        guard let slot = slots[name] else { return nil }
        cached = slot
        return slot
    }

    /// Sets or lifts `service`'s per-key limit; a changed limit keeps what each key spent.
    /// - Returns: the keys that rested: the caller gives them their turns back (their dues were
    ///   the old limit's; a key still without a token rests again).
    mutating func set(_ service: String, _ limit: RateLimit?) -> [String] {
        guard let limit else {
            guard let slot = slots.removeValue(forKey: service) else { return [] }
            let gone = entries[slot]
            entries[slot] = Service(name: "", limit: gone.limit)
            names[slot] = ""
            limits[slot] = nil
            bucketCount -= gone.buckets.count
            return Array(gone.resting.keys)
        }
        guard let slot = slots[service] else {
            if let free = names.firstIndex(of: "") {
                entries[free] = Service(name: service, limit: limit)
                names[free] = service
                limits[free] = limit
                slots[service] = free
            } else {
                slots[service] = entries.count
                entries.append(Service(name: service, limit: limit))
                names.append(service)
                limits.append(limit)
            }
            return []
        }
        let now = self.now
        limits[slot] = limit
        return entries[slot].change(to: limit, now: now)
    }

    /// Whether work of `key` of `service` may start now (its token is there, not taken); if not,
    /// the key rests until its token is due. `true` for a service without a per-key limit.
    mutating func mayStart(_ service: String, key: String) -> Bool {
        guard !isEmpty, let slot = slots[service] else { return true }
        return check(slot, key, taking: false)
    }

    /// Takes a token of `key` of `service` for a start; `false` (the key rests) if there is none.
    /// `true` for a service without a per-key limit.
    mutating func take(_ service: String, key: String) -> Bool {
        guard !isEmpty, let slot = slots[service] else { return true }
        return check(slot, key, taking: true)
    }

    /// ``mayStart(_:key:)`` or ``take(_:key:)`` (`taking`) for the service in `slot`, changed in
    /// place.
    mutating func check(_ slot: Int, _ key: String, taking: Bool) -> Bool {
        let (now, shared) = (self.now, bucketCount >= Self.maxBuckets)
        let (may, restsUntil, added) = entries[slot].check(key, now: now, shared: shared, taking: taking)
        bucketCount += added
        if let restsUntil {
            restings += 1
            wakes.insert(Wake(due: restsUntil, sequence: restings, service: names[slot], key: key))
        }
        return may
    }

    /// When the `position`-th start of `key` of the service in `slot` from now may go, if
    /// nothing else takes its tokens meanwhile.
    mutating func due(at slot: Int, key: String, position: Int) -> Int64 {
        let (now, shared) = (self.now, bucketCount >= Self.maxBuckets)
        return entries[slot].due(key, position: position, now: now, shared: shared)
    }

    /// A call of `service` was answered at once because its key's limit would have made it wait
    /// past its deadline.
    mutating func refused(at slot: Int) {
        entries[slot].refused += 1
    }

    /// When the earliest resting key's token is due, if a key rests.
    var nextWake: Int64? { wakes.min?.due }

    /// The keys whose token is due by `now`, no longer resting: their queues give them turns
    /// again.
    mutating func takeDue(now: Int64) -> [(service: String, key: String)] {
        var due: [(service: String, key: String)] = []
        while let first = wakes.min, first.due <= now {
            wakes.removeMin()
            guard let slot = slots[first.service], entries[slot].resting[first.key] == first.due else { continue }
            entries[slot].resting[first.key] = nil
            due.append((first.service, first.key))
        }
        return due
    }

    /// Drops the buckets that are full again (the same as none; a key that rests has none full).
    mutating func dropFullBuckets(now: Int64) {
        for slot in entries.indices where !names[slot].isEmpty {
            bucketCount -= entries[slot].dropFullBuckets(now: now)
        }
        if wakes.count > 1024, wakes.count > 2 * restingCount {
            wakes = Heap(wakes.unordered.filter { entry($0.service)?.resting[$0.key] == $0.due })
        }
    }

    /// Keys resting now, every service's.
    var restingCount: Int { entries.reduce(0) { $0 + $1.resting.count } }
}
