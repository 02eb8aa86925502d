import DequeModule
import HeapModule
import SkyProtocol
import SkyWire

/// The requests that wait for a worker: a sub-machine of the broker's, as postgres-nio's
/// `PoolStateMachine` keeps its `RequestQueue`. It holds each service's queue in arrival order,
/// the counts and bytes the broker's limits are checked against, and when each request must be
/// looked at again if no worker takes it. Its state is private: the broker tells it what came
/// and went and asks it what waits; what is not the queue's (each client's share, the table of
/// unanswered requests, the workers, the no-workers grace) the broker keeps.
///
/// A request cancelled or expired while it waits leaves a dead entry behind (without its body):
/// taking it out of the middle of a deque would move its neighbours. Dead entries go when they
/// reach the head, or in ``compactIfMostlyDead()`` once they outweigh the live ones.
///
/// Once a request with a concurrency key (``SkyProtocol/TaskRequest/concurrencyKey``) comes to a
/// service, its lane takes its requests in the order of a ``KeyTurns``: round-robin across keys
/// (requests without a key are the key ""), priority bands first, each key held to its
/// requests' limit, and each key to its per-key rate limit if the service has one (a key out of
/// tokens gives up its turn: ``KeyRateBook``). A lane that never saw a key costs nothing of it;
/// under a per-key limit its head (the key "") waits for that key's token.
struct RequestQueue: Sendable {
    typealias QueuedRequest = BrokerStateMachine.QueuedRequest
    typealias Number = ServiceBook.Number

    /// When a waiting request must be looked at again (its deadline, the broker's maximum wait,
    /// or its service's no-workers grace). The request is found again by its arrival number.
    struct Deadline: Comparable, Sendable {
        var expiry: Int64
        var arrival: UInt64

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.expiry < rhs.expiry }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.expiry == rhs.expiry && lhs.arrival == rhs.arrival }
    }

    /// One service's queue: its entries in arrival-number order, live or dead (those without a
    /// concurrency key, once ``keyed`` is there), and the count and bytes of the live ones (with
    /// a key or not).
    private struct Lane: Sendable {
        var entries: Deque<QueuedRequest> = []
        var live = 0
        var bytes = 0
        /// The service's name, for its per-key rate limit (the last request queued's), and its
        /// slot in the ``KeyRateBook`` when last found (-1: not yet; checked by name).
        var name = ""
        var rateSlot = -1
        /// The requests with a key and the rotation, once a request with a key came; kept while
        /// anything waits or a key holds places.
        var keyed: KeyedLane?

        /// The slot of the service in `rates`, if it is limited per key.
        mutating func rateSlot(in rates: KeyRateBook) -> Int? { rates.slot(&rateSlot, name: name) }

        /// Whether the head of a lane without turns (its requests have no key: the key "") may
        /// start by its service's per-key rate limit, its token taken if `taking`.
        mutating func plainHeadMayStart(_ rates: inout KeyRateBook, taking: Bool) -> Bool {
            guard !rates.isEmpty, let slot = rateSlot(in: rates) else { return true }
            return rates.check(slot, "", taking: taking)
        }

        // The keyed lane's steps are the lane's own methods, run on it in place: read through
        // `lanes[service]`, the whole lane was copied (its tables retained and released) several
        // times a request.

        /// The head of `key`'s requests (dead entries ahead of it go, counted in `dead`), as the
        /// rotation sees it; `nil` if none of them waits.
        mutating func head(_ key: String, dead: inout Int) -> KeyTurns.Head? {
            guard keyed != nil, keyed!.live[key] != nil else { return nil }
            if key.isEmpty {
                while let first = entries.first {
                    if !first.dropped { return RequestQueue.turnHead(first) }
                    entries.removeFirst()
                    dead -= 1
                }
                return nil
            }
            while let first = keyed!.queues[key]?.first {
                if !first.dropped { return RequestQueue.turnHead(first) }
                keyed!.queues[key]!.removeFirst()
                keyed!.keyOf[first.arrival] = nil
                dead -= 1
            }
            return nil
        }

        /// The key whose turn is next, if one may go: a key without a rate token rests
        /// (``KeyTurns/rest(_:)``) until ``RequestQueue/restore(_:key:)``.
        mutating func nextKey(rates: inout KeyRateBook, dead: inout Int) -> String? {
            while let key = keyed!.turns.top() {
                let head = head(key, dead: &dead)
                guard keyed!.turns.confirm(key, head: head) else { continue }
                if rates.isEmpty { return key }
                guard let slot = rateSlot(in: rates), !rates.check(slot, key, taking: false) else { return key }
                keyed!.turns.rest(key)
            }
            return nil
        }

        /// The request whose turn is next, taken out (its rate token taken), holding a place if
        /// it has a limit; the lane's counts follow, the queue's are the caller's.
        mutating func popTurn(rates: inout KeyRateBook, dead: inout Int) -> QueuedRequest? {
            guard let key = nextKey(rates: &rates, dead: &dead) else { return nil }
            // `nextKey` left the key's head live at the front, and found its token there.
            let task: QueuedRequest
            if key.isEmpty {
                task = entries.removeFirst()
            } else {
                task = keyed!.queues[key]!.removeFirst()
                keyed!.keyOf[task.arrival] = nil
            }
            live -= 1
            bytes -= task.request.queuedSize
            if !rates.isEmpty, let slot = rateSlot(in: rates) { _ = rates.check(slot, key, taking: true) }
            if let count = keyed!.live[key], count > 1 {
                keyed!.live[key] = count - 1
            } else {
                keyed!.live[key] = nil
                removeDeadQueue(key, dead: &dead)
            }
            let next = head(key, dead: &dead)
            keyed!.turns.took(key, limited: task.request.concurrencyLimit > 0, next: next)
            endTurnsIfIdle(dead: &dead)
            return task
        }

        /// Nothing of `key` waits: its queue, dead entries only, goes.
        mutating func removeDeadQueue(_ key: String, dead: inout Int) {
            guard !key.isEmpty, let gone = keyed!.queues.removeValue(forKey: key) else { return }
            dead -= gone.count
            for entry in gone { keyed!.keyOf[entry.arrival] = nil }
        }

        /// With nothing waiting and no place held, the lane goes back to plain order.
        mutating func endTurnsIfIdle(dead: inout Int) {
            guard live == 0, keyed != nil, keyed!.turns.isIdle else { return }
            dead -= keyed!.queues.values.reduce(0) { $0 + $1.count }
            keyed = nil
        }
    }

    /// A lane's requests with a concurrency key, and the turns its requests are taken in.
    private struct KeyedLane: Sendable {
        /// Each key's requests in arrival-number order, live or dead.
        var queues: [String: Deque<QueuedRequest>] = [:]
        /// Live requests per key; "" counts the lane's own entries (those without a key).
        var live: [String: Int] = [:]
        /// The key of each request in ``queues``, by arrival number.
        var keyOf: [UInt64: String] = [:]
        var turns = KeyTurns()
    }

    /// Where an entry is: its service's lane, its key's queue (`nil`: the lane's own entries)
    /// and its index there.
    private struct Place {
        var service: Int
        var key: String?
        var index: Int
    }

    /// By service number (``ServiceBook``), grown as numbers are first used. A number is given
    /// to another service only once its lane is empty (``hasEntries(_:)``).
    private var lanes: [Lane] = []
    /// Live waiting requests of every service.
    private(set) var count = 0
    /// Their bytes (bodies and trace frames).
    private(set) var bytes = 0
    /// Dead entries still in a lane.
    private(set) var deadEntries = 0
    private var deadlines = ExpiryQueue<Deadline>()
    /// Arrivals so far: arrival numbers are never used twice, so a stale one finds nothing.
    private var arrivals: UInt64 = 0

    /// The next arrival number for a request of `priority`, without its service's bits (see
    /// ``BrokerStateMachine/arrival(_:priority:)``).
    mutating func nextArrival(priority: Int8) -> UInt64 {
        arrivals += 1
        return BrokerStateMachine.arrival(arrivals, priority: priority)
    }

    /// Live waiting requests of a service.
    func count(of service: Number) -> Int { Int(service) < lanes.count ? lanes[Int(service)].live : 0 }

    /// Their bytes.
    func bytes(of service: Number) -> Int { Int(service) < lanes.count ? lanes[Int(service)].bytes : 0 }

    /// Whether a service's queue holds entries, live or dead: while it does, its number is in
    /// use.
    func hasEntries(_ service: Number) -> Bool {
        Int(service) < lanes.count && (!lanes[Int(service)].entries.isEmpty || lanes[Int(service)].keyed != nil)
    }

    /// Entries in the lanes and the deadline queue, live or not (for tests of their bounds).
    var entryCounts: (queued: Int, deadlines: Int) {
        (
            lanes.reduce(0) { $0 + $1.entries.count + ($1.keyed?.queues.values.reduce(0) { $0 + $1.count } ?? 0) },
            deadlines.count
        )
    }

    /// Puts a request in its service's queue at its arrival number's place (at the back, unless
    /// it has a higher priority than the last waiting or comes back from a lost worker), to be
    /// looked at again at `expiry`.
    mutating func insert(_ task: consuming QueuedRequest, expiry: Int64) {
        let service = Int(task.service)
        let size = task.request.queuedSize
        while lanes.count <= service { lanes.append(Lane()) }
        // A number is given to another service once its lane is empty: the name follows it.
        if lanes[service].name != task.request.service { lanes[service].name = task.request.service }
        lanes[service].live += 1
        lanes[service].bytes += size
        count += 1
        bytes += size
        deadlines.insert(Deadline(expiry: expiry, arrival: task.arrival))
        let key = task.request.concurrencyKey
        guard key != nil || lanes[service].keyed != nil else {
            // Last: the task is moved into its lane.
            lanes[service].entries.insertInOrder(consume task)
            return
        }
        if lanes[service].keyed == nil { startTurns(service, unkeyed: lanes[service].live - 1) }
        let arrival = task.arrival
        if let key {
            lanes[service].keyed!.keyOf[arrival] = key
            lanes[service].keyed!.queues[key, default: []].insertInOrder(task)
        } else {
            lanes[service].entries.insertInOrder(task)
        }
        let turnKey = key ?? ""
        lanes[service].keyed!.live[turnKey, default: 0] += 1
        if let head = head(service, turnKey) { lanes[service].keyed!.turns.arrived(turnKey, head: head) }
    }

    /// A service's first request with a key came: its lane takes turns from now on, the
    /// requests without a key that wait (`unkeyed`) as the key "".
    private mutating func startTurns(_ service: Int, unkeyed: Int) {
        var keyed = KeyedLane()
        if unkeyed > 0 { keyed.live[""] = unkeyed }
        lanes[service].keyed = keyed
        if unkeyed > 0, let head = head(service, "") { lanes[service].keyed!.turns.arrived("", head: head) }
    }

    /// The head of `key`'s requests in a keyed lane (dead entries ahead of it go), as the
    /// rotation sees it; `nil` if none of them waits.
    private mutating func head(_ service: Int, _ key: String) -> KeyTurns.Head? {
        lanes[service].head(key, dead: &deadEntries)
    }

    /// What the rotation needs of a request: its priority band (higher first) and its limit.
    static func turnHead(_ task: QueuedRequest) -> KeyTurns.Head {
        KeyTurns.Head(priority: 3 - Int8(task.arrival >> 62), limit: task.request.concurrencyLimit)
    }

    /// A key that rested for a rate token may go again: it gets its turn back.
    /// - Returns: whether requests of the key wait.
    @discardableResult
    mutating func restore(_ service: Number, key: String) -> Bool {
        let lane = Int(service)
        guard lane < lanes.count, lanes[lane].keyed != nil else { return false }
        let head = head(lane, key)
        lanes[lane].keyed!.turns.restore(key, head: head)
        return head != nil
    }

    /// Live waiting requests of `key` in a service (0 in a lane that takes no turns).
    func waiting(_ service: Number, key: String) -> Int {
        guard Int(service) < lanes.count else { return 0 }
        return lanes[Int(service)].keyed?.live[key] ?? 0
    }

    /// Whether a request of `key` with `limit` may start now without waiting for its turn:
    /// fewer than `limit` requests of the key hold places (nothing of the service waits, or the
    /// caller would queue it).
    func mayStart(_ service: Number, key: String, limit: UInt32) -> Bool {
        guard limit > 0, Int(service) < lanes.count, let keyed = lanes[Int(service)].keyed else { return true }
        return keyed.turns.placed[key, default: 0] < Int(limit)
    }

    /// A request of `key` with a limit went to a worker without waiting: it holds a place until
    /// ``vacate(_:key:)``.
    mutating func placeDirectly(_ service: Number, key: String) {
        let lane = Int(service)
        while lanes.count <= lane { lanes.append(Lane()) }
        if lanes[lane].keyed == nil { startTurns(lane, unkeyed: lanes[lane].live) }
        lanes[lane].keyed!.turns.placeDirectly(key)
    }

    /// A request of `key` that held a place left its worker (answered, or its worker was lost).
    /// - Returns: whether requests of the key wait (the caller offers them to workers).
    @discardableResult
    mutating func vacate(_ service: Number, key: String) -> Bool {
        let lane = Int(service)
        guard lane < lanes.count, lanes[lane].keyed != nil else { return false }
        let head = head(lane, key)
        let waiting = lanes[lane].keyed!.turns.vacate(key, head: head)
        endTurnsIfIdle(lane)
        return waiting
    }

    /// The places `key` holds in a service (requests of it at workers under a limit).
    func placed(_ service: Number, key: String) -> Int {
        guard Int(service) < lanes.count else { return 0 }
        return lanes[Int(service)].keyed?.turns.placed[key] ?? 0
    }

    /// Each key of a keyed lane: its waiting requests and the places it holds.
    func keys(of service: Number) -> [String: (waiting: Int, placed: Int)] {
        guard Int(service) < lanes.count, let keyed = lanes[Int(service)].keyed else { return [:] }
        return keyed.turns.counts(waiting: keyed.live)
    }

    /// Whether a service's lane takes turns (a request with a key came, and something of it
    /// waits or holds a place).
    func takesTurns(_ service: Number) -> Bool { Int(service) < lanes.count && lanes[Int(service)].keyed != nil }

    /// A keyed lane with nothing waiting and no place held goes back to plain order.
    private mutating func endTurnsIfIdle(_ service: Int) {
        lanes[service].endTurnsIfIdle(dead: &deadEntries)
    }

    /// Marks the waiting request that arrived as number `arrival` dead (cancelled or expired):
    /// out of the counts, its body let go.
    /// - Returns: its client and bytes, for the client's share; `nil` if it does not wait.
    mutating func drop(arrival: UInt64) -> (client: BrokerStateMachine.ClientNumber, bytes: Int)? {
        guard let place = place(of: arrival), !entry(at: place).dropped else { return nil }
        let size = entry(at: place).request.queuedSize
        let client = entry(at: place).client
        unmark(place.service, size)
        change(at: place) { entry in
            entry.request.body = []
            entry.dropped = true
        }
        deadEntries += 1
        if lanes[place.service].keyed != nil { leftTurns(place.service, key: place.key ?? "") }
        return (client, size)
    }

    /// A live request of `key` left a keyed lane.
    private mutating func leftTurns(_ service: Int, key: String) {
        if let live = lanes[service].keyed!.live[key], live > 1 {
            lanes[service].keyed!.live[key] = live - 1
            return
        }
        lanes[service].keyed!.live[key] = nil
        lanes[service].keyed!.turns.emptied(key)
        removeDeadQueue(service, key)
        endTurnsIfIdle(service)
    }

    /// Nothing of `key` waits: its queue, dead entries only, goes.
    private mutating func removeDeadQueue(_ service: Int, _ key: String) {
        lanes[service].removeDeadQueue(key, dead: &deadEntries)
    }

    /// The oldest live request of a service (in a keyed lane, the head of the key whose turn it
    /// is, its rate token taken), taken out, with dead entries ahead of it.
    mutating func popFirst(_ service: Number, rates: inout KeyRateBook) -> QueuedRequest? {
        let lane = Int(service)
        guard lane < lanes.count else { return nil }
        if lanes[lane].keyed != nil { return popTurn(lane, rates: &rates) }
        // `oldest` found the key ""'s token there.
        _ = lanes[lane].plainHeadMayStart(&rates, taking: true)
        return popPlain(lane)
    }

    /// A live request of a service, taken out to be answered (not to run): the oldest, or in a
    /// keyed lane any, whatever the turns and limits say (a parked key's too).
    mutating func popToAnswer(_ service: Number) -> QueuedRequest? {
        let lane = Int(service)
        guard lane < lanes.count, let keys = lanes[lane].keyed?.queues.keys else { return popPlain(lane) }
        while lanes[lane].keyed != nil, let task = lanes[lane].entries.popFirst() {
            if task.dropped {
                deadEntries -= 1
                continue
            }
            unmark(lane, task.request.queuedSize)
            leftTurns(lane, key: "")
            return task
        }
        for key in Array(keys) {
            while lanes[lane].keyed != nil, let task = lanes[lane].keyed!.queues[key]?.popFirst() {
                lanes[lane].keyed!.keyOf[task.arrival] = nil
                if task.dropped {
                    deadEntries -= 1
                    continue
                }
                unmark(lane, task.request.queuedSize)
                leftTurns(lane, key: key)
                return task
            }
        }
        return lanes[lane].keyed == nil ? popPlain(lane) : nil
    }

    /// The oldest live request of a lane without turns, taken out.
    private mutating func popPlain(_ lane: Int) -> QueuedRequest? {
        guard lane < lanes.count, lanes[lane].keyed == nil else { return nil }
        while let task = lanes[lane].entries.popFirst() {
            guard !task.dropped else {
                deadEntries -= 1
                continue
            }
            unmark(lane, task.request.queuedSize)
            return consume task
        }
        return nil
    }

    /// The request whose turn is next in a keyed lane, taken out, holding a place if it has a
    /// limit.
    private mutating func popTurn(_ service: Int, rates: inout KeyRateBook) -> QueuedRequest? {
        guard let task = lanes[service].popTurn(rates: &rates, dead: &deadEntries) else { return nil }
        count -= 1
        bytes -= task.request.queuedSize
        return task
    }

    /// Arrival number of the request that goes next in a service (the oldest live one, or in a
    /// keyed lane the head of the key whose turn it is); dead entries ahead of it go.
    mutating func oldest(_ service: Number, rates: inout KeyRateBook) -> UInt64? {
        let lane = Int(service)
        guard lane < lanes.count else { return nil }
        if lanes[lane].keyed != nil {
            guard let key = lanes[lane].nextKey(rates: &rates, dead: &deadEntries) else { return nil }
            return key.isEmpty ? lanes[lane].entries.first?.arrival : lanes[lane].keyed!.queues[key]?.first?.arrival
        }
        // The head's fields read in place: `entries.first` copied the whole request out (its
        // references counted up and down again) every time a worker looked for work.
        while !lanes[lane].entries.isEmpty {
            if !lanes[lane].entries[0].dropped {
                return lanes[lane].plainHeadMayStart(&rates, taking: false) ? lanes[lane].entries[0].arrival : nil
            }
            lanes[lane].entries.removeFirst()
            deadEntries -= 1
        }
        return nil
    }

    /// The entry of the request that arrived as number `arrival`, live or dead, if it is still
    /// in its lane.
    /// The newest live request of `client` among the last `limit` entries of the lanes (their
    /// own and their keys' queues), by arrival number: the one that gives way when the queue is
    /// full and another client, under its share, brings one. `nil` if none is found within the
    /// bound: a client's requests behind many of others' are not looked for.
    func newestWaiting(of client: BrokerStateMachine.ClientNumber, lookingAt limit: Int) -> UInt64? {
        var newest: UInt64?
        var looked = 0
        func scan(_ entries: Deque<QueuedRequest>) {
            var index = entries.endIndex
            while index > entries.startIndex, looked < limit {
                index -= 1
                looked += 1
                guard entries[index].client == client, !entries[index].dropped else { continue }
                let arrival = entries[index].arrival
                if arrival > newest ?? 0 { newest = arrival }
                return
            }
        }
        for lane in lanes {
            scan(lane.entries)
            for queue in lane.keyed?.queues.values ?? [:].values { scan(queue) }
        }
        return newest
    }

    func request(arrival: UInt64) -> QueuedRequest? {
        place(of: arrival).map { entry(at: $0) }
    }

    /// Changes the entry of the request that arrived as number `arrival`, if there is one.
    mutating func update(arrival: UInt64, _ change: (inout QueuedRequest) -> Void) {
        guard let place = place(of: arrival) else { return }
        self.change(at: place, change)
    }

    /// The earliest time to look at again, taken out, if it is due by `now`.
    mutating func popDeadline(dueBy now: Int64) -> Deadline? {
        guard let first = deadlines.min, first.expiry <= now else { return nil }
        return deadlines.removeMin()
    }

    /// Looks at a waiting request again at `expiry` (its grace ran out, but it may wait on).
    mutating func lookAgain(at expiry: Int64, arrival: UInt64) {
        deadlines.insert(Deadline(expiry: expiry, arrival: arrival))
    }

    /// Drops dead entries once they outweigh the live ones, in the lanes and in the deadline
    /// queue (whose entries stay when their request is dispatched or answered). Amortised
    /// O(log n) per request: a deadline is kept only after a binary search finds it waiting.
    mutating func compactIfMostlyDead() {
        if deadEntries > 256 && deadEntries > count {
            for lane in lanes.indices where !lanes[lane].entries.isEmpty {
                lanes[lane].entries = Deque(lanes[lane].entries.filter { !$0.dropped })
            }
            for lane in lanes.indices where lanes[lane].keyed != nil {
                for (key, entries) in lanes[lane].keyed!.queues {
                    for entry in entries where entry.dropped { lanes[lane].keyed!.keyOf[entry.arrival] = nil }
                    lanes[lane].keyed!.queues[key] = Deque(entries.filter { !$0.dropped })
                }
            }
            deadEntries = 0
        }
        if deadlines.count > 1024 && deadlines.count > 2 * count {
            // The entries of live requests are kept as they are, not made again from the
            // requests: an entry of a request that waits for a service nobody serves ends at its
            // no-workers grace, which the request does not hold (rebuilt from the deadline alone,
            // such a request without a timeout waited out --max-wait instead of the grace). First
            // the dead ones go, in one pass in order; then, only if that was not enough (requests
            // queued again after lost workers, each with two), one per request, the earliest,
            // found by sorting by arrival: a dictionary by arrival hashed every entry
            // (docs/performance-history.md, "a request's key hashed once").
            var kept = ExpiryQueue<Deadline>()
            swap(&kept, &deadlines)
            kept.removeAll { !isWaiting($0.arrival) }
            deadlines = kept
            guard deadlines.count > 2 * count else { return }
            var live = deadlines.unordered
            live.sort { ($0.arrival, $0.expiry) < ($1.arrival, $1.expiry) }
            var earliest: [Deadline] = []
            earliest.reserveCapacity(live.count)
            for entry in live where earliest.last?.arrival != entry.arrival { earliest.append(entry) }
            deadlines = ExpiryQueue(earliest)
        }
    }

    /// Nothing waits any more: the lanes and the deadline queue are made anew, so that the memory a large
    /// queue grew to can go back to the system (Swift's collections keep their capacity).
    mutating func releaseStorage() {
        precondition(count == 0, "the queue's storage is released only while nothing waits")
        // The places keys hold outlive the queue: their requests are at workers.
        lanes = lanes.map { lane in
            var fresh = Lane()
            if let keyed = lane.keyed, !keyed.turns.placed.isEmpty { fresh.keyed = KeyedLane(turns: keyed.turns) }
            return fresh
        }
        deadEntries = 0
        deadlines = ExpiryQueue()
    }

    /// Forgets every entry (the broker stopped and answered what waited); arrival numbers go on.
    mutating func removeAll() {
        lanes = []
        count = 0
        bytes = 0
        deadEntries = 0
        deadlines = ExpiryQueue()
    }

    /// Where the request that arrived as number `arrival` is: its service's lane (in the arrival
    /// number's low bits) and its place there, by binary search (lanes are in arrival order).
    private func place(of arrival: UInt64) -> Place? {
        let service = Int(arrival & BrokerStateMachine.slotMask)
        guard service < lanes.count else { return nil }
        if let keyed = lanes[service].keyed, let key = keyed.keyOf[arrival], let entries = keyed.queues[key] {
            let index = entries.place(of: arrival)
            return index < entries.endIndex && entries[index].arrival == arrival
                ? Place(service: service, key: key, index: index) : nil
        }
        let entries = lanes[service].entries
        let index = entries.place(of: arrival)
        return index < entries.endIndex && entries[index].arrival == arrival
            ? Place(service: service, key: nil, index: index) : nil
    }

    /// Whether the request that arrived as number `arrival` still waits, read in place (the
    /// lane and the entry are not copied out, which would count their references up and down).
    @inline(__always)  // called, it copied the whole queue from the compaction's closure, once an entry
    private func isWaiting(_ arrival: UInt64) -> Bool {
        let service = Int(arrival & BrokerStateMachine.slotMask)
        guard service < lanes.count else { return false }
        // A keyed lane (rare) is read through copies of its tables; a plain one in place.
        if let keyed = lanes[service].keyed, let key = keyed.keyOf[arrival] {
            guard let entries = keyed.queues[key] else { return false }
            let index = entries.place(of: arrival)
            return index < entries.endIndex && entries[index].arrival == arrival && !entries[index].dropped
        }
        let index = lanes[service].entries.place(of: arrival)
        return index < lanes[service].entries.endIndex && lanes[service].entries[index].arrival == arrival
            && !lanes[service].entries[index].dropped
    }

    private func entry(at place: Place) -> QueuedRequest {
        guard let key = place.key else { return lanes[place.service].entries[place.index] }
        return lanes[place.service].keyed!.queues[key]![place.index]
    }

    private mutating func change(at place: Place, _ change: (inout QueuedRequest) -> Void) {
        guard let key = place.key else {
            change(&lanes[place.service].entries[place.index])
            return
        }
        change(&lanes[place.service].keyed!.queues[key]![place.index])
    }

    private mutating func unmark(_ service: Int, _ size: Int) {
        lanes[service].live -= 1
        lanes[service].bytes -= size
        count -= 1
        bytes -= size
    }
}

extension Deque where Element == BrokerStateMachine.QueuedRequest {
    /// The first place whose arrival number is not below `arrival` (a lane is kept in
    /// arrival-number order).
    func place(of arrival: UInt64) -> Int {
        // Before the oldest or after the newest, without a search: the queue's compaction asks
        // this of every deadline entry, most of them of requests dispatched long ago.
        guard !isEmpty, self[startIndex].arrival < arrival else { return startIndex }
        if self[endIndex - 1].arrival < arrival { return endIndex }
        var low = startIndex
        var high = endIndex
        while low < high {
            let middle = (low + high) / 2
            if self[middle].arrival < arrival { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Puts `task` at its place: at the back, unless it has a higher priority than the last or
    /// comes back from a lost worker (then ahead of the younger ones).
    mutating func insertInOrder(_ task: consuming Element) {
        // The last one's arrival read in place: `last` copied the whole request out (its
        // body's and service name's references counted up and down again).
        if !isEmpty, self[count - 1].arrival > task.arrival {
            let place = place(of: task.arrival)
            insert(consume task, at: place)
        } else {
            append(consume task)
        }
    }
}
