import DequeModule
import HeapModule
import SkyProtocol

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

    /// One service's queue: its entries in arrival-number order, live or dead, and the count and
    /// bytes of the live ones.
    private struct Lane: Sendable {
        var entries: Deque<QueuedRequest> = []
        var live = 0
        var bytes = 0
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
    private var deadlines = Heap<Deadline>()
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
        Int(service) < lanes.count && !lanes[Int(service)].entries.isEmpty
    }

    /// Entries in the lanes and the deadline heap, live or not (for tests of their bounds).
    var entryCounts: (queued: Int, deadlines: Int) {
        (lanes.reduce(0) { $0 + $1.entries.count }, deadlines.count)
    }

    /// Puts a request in its service's queue at its arrival number's place (at the back, unless
    /// it has a higher priority than the last waiting or comes back from a lost worker), to be
    /// looked at again at `expiry`.
    mutating func insert(_ task: consuming QueuedRequest, expiry: Int64) {
        let service = Int(task.service)
        let size = task.request.queuedSize
        while lanes.count <= service { lanes.append(Lane()) }
        lanes[service].live += 1
        lanes[service].bytes += size
        count += 1
        bytes += size
        deadlines.insert(Deadline(expiry: expiry, arrival: task.arrival))
        // Last: the task is moved into its lane.
        lanes[service].entries.insertInOrder(task)
    }

    /// Marks the waiting request that arrived as number `arrival` dead (cancelled or expired):
    /// out of the counts, its body let go.
    /// - Returns: its client and bytes, for the client's share; `nil` if it does not wait.
    mutating func drop(arrival: UInt64) -> (client: BrokerStateMachine.ClientNumber, bytes: Int)? {
        guard let (service, index) = place(of: arrival), !lanes[service].entries[index].dropped else { return nil }
        let size = lanes[service].entries[index].request.queuedSize
        let client = lanes[service].entries[index].client
        unmark(service, size)
        lanes[service].entries[index].request.body = []
        lanes[service].entries[index].dropped = true
        deadEntries += 1
        return (client, size)
    }

    /// The oldest live request of a service, taken out, with dead entries ahead of it.
    mutating func popFirst(_ service: Number) -> QueuedRequest? {
        let lane = Int(service)
        guard lane < lanes.count else { return nil }
        while let task = lanes[lane].entries.popFirst() {
            guard !task.dropped else {
                deadEntries -= 1
                continue
            }
            unmark(lane, task.request.queuedSize)
            return task
        }
        return nil
    }

    /// Arrival number of the oldest live request of a service; dead entries ahead of it go.
    mutating func oldest(_ service: Number) -> UInt64? {
        let lane = Int(service)
        guard lane < lanes.count else { return nil }
        while let head = lanes[lane].entries.first {
            if !head.dropped { return head.arrival }
            lanes[lane].entries.removeFirst()
            deadEntries -= 1
        }
        return nil
    }

    /// The entry of the request that arrived as number `arrival`, live or dead, if it is still
    /// in its lane.
    func request(arrival: UInt64) -> QueuedRequest? {
        place(of: arrival).map { lanes[$0.service].entries[$0.index] }
    }

    /// Changes the entry of the request that arrived as number `arrival`, if there is one.
    mutating func update(arrival: UInt64, _ change: (inout QueuedRequest) -> Void) {
        guard let (service, index) = place(of: arrival) else { return }
        change(&lanes[service].entries[index])
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
    /// heap (whose entries stay when their request is dispatched or answered). Amortised
    /// O(log n) per request: a deadline is kept only after a binary search finds it waiting.
    mutating func compactIfMostlyDead() {
        if deadEntries > 256 && deadEntries > count {
            for lane in lanes.indices where !lanes[lane].entries.isEmpty {
                lanes[lane].entries = Deque(lanes[lane].entries.filter { !$0.dropped })
            }
            deadEntries = 0
        }
        if deadlines.count > 1024 && deadlines.count > 2 * count {
            // The entries of live requests are kept as they are, not made again from the
            // requests: an entry of a request that waits for a service nobody serves ends at its
            // no-workers grace, which the request does not hold (rebuilt from the deadline alone,
            // such a request without a timeout waited out --max-wait instead of the grace). One
            // per request, the earliest: a request queued again after a lost worker has two.
            var earliest: [UInt64: Int64] = [:]
            for entry in deadlines.unordered {
                guard let (service, index) = place(of: entry.arrival), !lanes[service].entries[index].dropped
                else { continue }
                earliest[entry.arrival] = min(earliest[entry.arrival] ?? .max, entry.expiry)
            }
            deadlines = Heap(earliest.map { Deadline(expiry: $0.value, arrival: $0.key) })
        }
    }

    /// Nothing waits any more: the lanes and the heap are made anew, so that the memory a large
    /// queue grew to can go back to the system (Swift's collections keep their capacity).
    mutating func releaseStorage() {
        precondition(count == 0, "the queue's storage is released only while nothing waits")
        lanes = []
        deadEntries = 0
        deadlines = Heap()
    }

    /// Forgets every entry (the broker stopped and answered what waited); arrival numbers go on.
    mutating func removeAll() {
        lanes = []
        count = 0
        bytes = 0
        deadEntries = 0
        deadlines = Heap()
    }

    /// Where the request that arrived as number `arrival` is: its service's lane (in the arrival
    /// number's low bits) and its place there, by binary search (lanes are in arrival order).
    private func place(of arrival: UInt64) -> (service: Int, index: Int)? {
        let service = Int(arrival & BrokerStateMachine.slotMask)
        guard service < lanes.count else { return nil }
        let entries = lanes[service].entries
        let index = entries.place(of: arrival)
        return index < entries.endIndex && entries[index].arrival == arrival ? (service, index) : nil
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
            insert(task, at: place(of: task.arrival))
        } else {
            append(task)
        }
    }
}
