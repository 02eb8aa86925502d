import DequeModule
import SkyProtocol

/// Kept calls in flight by request id alone (the request tables key them by client too), so
/// that another process asking about the job a call may become (`mmi.jobs.status`,
/// `mmi.jobs.wait` with the call's id) hears where the call stands instead of "unknown"; and the
/// callers waiting on them.
///
/// Entries are added when a kept call arrives and taken out when it is answered or kept; one
/// that ended otherwise (refused, dropped, cancelled) is found stale when looked up, and all
/// stale ones are swept once the index has doubled since the last sweep, so its size stays
/// within twice the kept calls in flight plus ``sweepFloor``.
struct KeptCallIndex: Sendable {
    typealias ClientNumber = BrokerStateMachine.ClientNumber

    /// A caller waiting (`mmi.jobs.wait`) on a kept call in flight, until `due`.
    struct Hold: Sendable {
        var id: RequestID
        var caller: JobCaller
        var due: Int64
    }

    private var clients: [RequestID: ClientNumber] = [:]
    private var sweepAt = Self.sweepFloor
    /// The callers waiting on each call, and its service (for what they are told).
    private var waiters: [RequestID: (service: String, callers: [JobCaller])] = [:]
    private(set) var waiterCount = 0
    /// Held waits per peer: one peer's flood of waits may not take every other's place.
    private var waitsOf = PeerTally()
    /// Every call in ``waiters``.
    private var heldCallers: Set<JobCaller> = []
    /// Every hold, oldest first (all last as long, so also soonest due first); one answered
    /// meanwhile is skipped when it comes up.
    private var holds: Deque<Hold> = []

    static let sweepFloor = 1024
    /// Most callers waiting on kept calls in flight, in all and from one peer; beyond them a
    /// wait is answered at once (as the job book does beyond its own).
    static let maxWaiters = JobBook.maxWaiters
    static let maxWaitersPerPeer = 1_000

    var isEmpty: Bool { clients.isEmpty }

    /// The client a kept call of request id `id` came from, if one is indexed.
    func client(of id: RequestID) -> ClientNumber? { clients[id] }

    /// Every call indexed, live or stale.
    var calls: [RequestID: ClientNumber] { clients }

    /// The index reached twice its size after the last sweep: the owner sweeps it
    /// (``sweep(removing:)``).
    var needsSweep: Bool { clients.count >= sweepAt }

    /// A kept call arrived (the owner checked that no live call holds `id`).
    mutating func add(_ id: RequestID, from client: ClientNumber) {
        clients[id] = client
    }

    /// Takes out the stale entries the owner found.
    mutating func sweep(removing stale: [RequestID]) {
        for id in stale { clients[id] = nil }
        sweepAt = max(Self.sweepFloor, clients.count * 2)
    }

    /// Takes out the call of `id` from `client` (answered, or kept); returns its waiters, if
    /// any.
    mutating func remove(_ id: RequestID, from client: ClientNumber) -> (service: String, callers: [JobCaller])? {
        guard clients[id] == client else { return nil }
        clients[id] = nil
        guard let taken = waiters.removeValue(forKey: id) else { return nil }
        for caller in taken.callers { released(caller) }
        return taken
    }

    /// Takes out an entry found stale.
    mutating func forget(_ id: RequestID) {
        clients[id] = nil
    }

    /// Holds `caller` until `due`; `false` beyond ``maxWaiters``.
    mutating func hold(_ caller: JobCaller, on id: RequestID, service: String, until due: Int64) -> Bool {
        guard waiterCount < Self.maxWaiters, waitsOf[caller.peer] < Self.maxWaitersPerPeer else {
            return false
        }
        heldCallers.insert(caller)
        waiters[id, default: (service, [])].callers.append(caller)
        waiterCount += 1
        waitsOf.add(caller.peer)
        holds.append(Hold(id: id, caller: caller, due: due))
        return true
    }

    /// Whether `caller` (the same peer, request id and attempt) is held already.
    func holds(_ caller: JobCaller) -> Bool { heldCallers.contains(caller) }

    /// The next hold that is due by `now` and still waiting, taken out.
    mutating func nextDue(now: Int64) -> Hold? {
        while let first = holds.first, first.due <= now {
            holds.removeFirst()
            guard let entry = waiters.index(forKey: first.id),
                let index = waiters.values[entry].callers.firstIndex(of: first.caller)
            else { continue }
            waiters.values[entry].callers.remove(at: index)
            if waiters.values[entry].callers.isEmpty { waiters.remove(at: entry) }
            released(first.caller)
            return first
        }
        if waiters.isEmpty { holds.removeAll() }
        return nil
    }

    private mutating func released(_ caller: JobCaller) {
        waiterCount -= 1
        waitsOf.remove(caller.peer)
        heldCallers.remove(caller)
    }
}
