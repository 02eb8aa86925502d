import SkyProtocol

/// The services the broker knows at the moment, by number: each one's workers, whether it is
/// paused or limited, and what it did in the current stats period, in one entry of an array.
/// Its waiting requests are in the ``RequestQueue``, by the same number.
///
/// A request's service name is looked up once, when it arrives; everything after (queueing,
/// dispatch, the reply's statistics, a worker's fill) goes by number. Before, five tables were
/// keyed by the name, and a task hashed it nine times.
///
/// A service is known while a worker serves it, requests of it wait, or it answered something
/// in the current stats period; the stats pass (``updateAll(keeping:_:)``) forgets the others, so that
/// an entry never goes away under a task that is being answered, and their numbers are free
/// for other services. Numbers fit in the low
/// ``BrokerStateMachine/slotBits`` of an arrival number (so a waiting request names its queue);
/// the last one, ``none``, names no service.
struct ServiceBook: Sendable {
    typealias Number = UInt32

    struct Entry: Sendable {
        var name: String
        /// It names a known service (a forgotten one's number is free).
        var inUse = true
        /// Its workers, in registration order.
        var workers: [PeerID] = []
        /// What it did in the current stats period, if anything.
        var window: ServiceWindow?
        /// Paused: nothing of it is sent to a worker (kept here, where dispatch looks, as well
        /// as by name in ``ServiceBook/paused``).
        var paused = false
        /// Its rate limit at work, if it has one (by name in ``ServiceBook/limits``).
        var bucket: TokenBucket?
        /// Starts under its limit, and calls its limit answered at once, since it was known.
        var limitStarted: UInt64 = 0
        var limitRefused: UInt64 = 0
        /// When its last worker left (the machine's ticks; `Int64.min`: never): the no-workers
        /// grace of a request that waits then counts from here, not from its arrival.
        var lastWorkerLeftAt = Int64.min
        /// The shortest no-workers grace a request of it asked for (nanoseconds; `Int64.max`:
        /// none asked), so that the look at its waiting requests after its last worker left
        /// comes no later than the first of their graces ends. Never raised: a look that comes
        /// early answers nothing it should not.
        var shortestAskedGrace = Int64.max

        var isServed: Bool { !workers.isEmpty }
        /// A limited service is kept while it is limited: forgotten, it would forget the
        /// tokens it spent.
        var isIdle: Bool { workers.isEmpty && window == nil && bucket == nil }
    }

    /// The number that names no service (a request refused before it had one).
    static let none = Number(BrokerStateMachine.slotMask)

    private var numbers: [String: Number] = [:]
    private var entries: [Entry] = []
    private var free: [Number] = []
    /// The number the last lookup by name found: most requests in a row name the service the
    /// one before named, and comparing two names costs less than hashing one. Checked against
    /// its entry, so a number freed or given to another service since finds nothing.
    private var lastFound = ServiceBook.none
    /// The services paused, known or not: an entry made for one of them is made paused.
    private(set) var paused: Set<String> = []
    /// Paused services whose resume is being written: it takes effect once it is on disk,
    /// unless a pause comes meanwhile (which takes it out).
    var resumesBeingWritten: Set<String> = []
    /// The services' rate limits, known services or not: an entry made for one of them gets
    /// its bucket.
    private(set) var limits: [String: RateLimit] = [:]

    /// Services known now.
    var count: Int { numbers.count }

    /// The numbers of the services known now, in no particular order.
    var known: Dictionary<String, Number>.Values { numbers.values }

    /// The number of a known service.
    func number(of name: String) -> Number? { numbers[name] }

    /// The number of `name`, which becomes known if it was not, unless `limit` services (or every
    /// number) are known already.
    mutating func number(for name: String, limit: Int) -> Number? {
        if isKnown(lastFound), entries[Int(lastFound)].name == name { return lastFound }
        if let number = numbers[name] {
            lastFound = number
            return number
        }
        guard numbers.count < limit else { return nil }
        let number: Number
        if let reused = free.popLast() {
            number = reused
            entries[Int(number)] = Entry(name: name, paused: paused.contains(name), bucket: bucket(for: name))
        } else {
            guard entries.count < Int(Self.none) else { return nil }
            number = Number(entries.count)
            entries.append(Entry(name: name, paused: paused.contains(name), bucket: bucket(for: name)))
        }
        numbers[name] = number
        return number
    }

    /// Pauses or resumes `name`, known or not.
    /// - Returns: whether that changed anything.
    @discardableResult
    mutating func setPaused(_ name: String, _ on: Bool) -> Bool {
        let changed = on ? paused.insert(name).inserted : paused.remove(name) != nil
        if let number = numbers[name] { entries[Int(number)].paused = on }
        return changed
    }

    /// Limits `name` to `limit`, or lifts its limit (`nil`); a known service's bucket changes
    /// with it, keeping the tokens it spent.
    /// - Parameter waiting: whether requests of a service wait (it stays known while they do).
    mutating func setLimit(_ name: String, _ limit: RateLimit?, now: Int64, waiting: (Number) -> Bool) {
        limits[name] = limit
        guard let number = numbers[name] else { return }
        entries[Int(number)].bucket = limit.map { TokenBucket($0, keeping: entries[Int(number)].bucket, now: now) }
        releaseIfIdle(number, waiting: waiting)
    }

    private func bucket(for name: String) -> TokenBucket? {
        limits.isEmpty ? nil : limits[name].map { TokenBucket($0) }
    }

    /// Whether `number` names a known service.
    func isKnown(_ number: Number) -> Bool { Int(number) < entries.count && entries[Int(number)].inUse }

    /// A known service's entry, changed in place.
    subscript(number: Number) -> Entry {
        _read { yield entries[Int(number)] }
        _modify { yield &entries[Int(number)] }
    }

    /// Runs `change` on a known service's entry in place: the path a request takes (a rate
    /// limit's token). The subscript's coroutines, called from another file, each allocated
    /// their frame: two or three allocations a request under a rate limit.
    @inline(__always)
    mutating func update<R>(_ number: Number, _ change: (inout Entry) -> R) -> R {
        change(&entries[Int(number)])
    }

    /// Reads a known service's entry in place (see ``update(_:_:)``).
    @inline(__always)
    func read<R>(_ number: Number, _ body: (borrowing Entry) -> R) -> R {
        body(entries[Int(number)])
    }

    /// Forgets a service that nobody serves, nothing of which waits and which answered nothing
    /// this period; its number is free again.
    private mutating func releaseIfIdle(_ number: Number, waiting: (Number) -> Bool) {
        guard isKnown(number), entries[Int(number)].isIdle, !waiting(number) else { return }
        numbers[entries[Int(number)].name] = nil
        entries[Int(number)] = Entry(name: "", inUse: false)
        free.append(number)
    }

    /// Every known service's entry, changed in place; then those that became idle are forgotten.
    /// - Parameter waiting: whether requests of a service wait (it stays known while they do).
    mutating func updateAll(keeping waiting: (Number) -> Bool, _ change: (Number, inout Entry) -> Void) {
        for number in Array(numbers.values) {
            change(number, &entries[Int(number)])
            releaseIfIdle(number, waiting: waiting)
        }
    }
}
