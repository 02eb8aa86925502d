import HeapModule
import SkyJournal
import SkyProtocol

/// The queued jobs of every service, each service's taken round-robin across concurrency keys
/// (``SkyProtocol/JobSubmission/concurrencyKey``), priorities first, and each key held to its
/// jobs' concurrency limit.
///
/// A service's keys take turns as in stride scheduling: each key has a *pass*, the next job goes
/// to the key of the highest head priority with the lowest pass, and a key's pass grows by one a
/// job. A key that comes (or comes back) takes the pass of the last turn given, so it goes
/// before any key that has had that turn already, and never gets turns for the time it was
/// away. So among keys of equal priority, each key waits at most one turn per other key. Jobs
/// without a key take their turns as the key "".
///
/// A key at its limit is *parked*: it has no turn until one of its jobs leaves its place
/// (``vacate(_:key:)``). Turns are entries of a heap found stale, not removed, when their key
/// changed (a new head of higher priority, a job cancelled): each key's live turn is the one
/// with its generation.
struct QueuedJobs: Sendable {
    typealias Entry = JobBook.QueueEntry

    /// A key's place in its service's rotation.
    struct Turn: Comparable, Sendable {
        var priority: Int8
        var pass: UInt64
        /// Among equal passes, the key that took its turn first goes first.
        var order: UInt64
        var key: String
        var generation: UInt32

        static func < (lhs: Self, rhs: Self) -> Bool {
            if lhs.priority != rhs.priority { return lhs.priority > rhs.priority }
            if lhs.pass != rhs.pass { return lhs.pass < rhs.pass }
            return lhs.order < rhs.order
        }

        static func == (lhs: Self, rhs: Self) -> Bool { lhs.order == rhs.order }
    }

    /// One service's queued jobs by key, and their rotation.
    struct Rotation: Sendable {
        /// Each key's queued jobs, best first; a cancelled job's entry stays until it is the head.
        var queues: [String: Heap<Entry>] = [:]
        /// Live entries per key.
        var live: [String: Int] = [:]
        /// Jobs per key that hold a place under their limit (prepared or running).
        var placed: [String: Int] = [:]
        /// The generation of each key's live turn; a key without one is parked or has nothing
        /// queued.
        var turnOf: [String: UInt32] = [:]
        /// Each key's pass: its live turn's, or the one it had when it was parked or ran out of
        /// queued jobs while it held places.
        var passOf: [String: UInt64] = [:]
        var turns = Heap<Turn>()
        /// The pass of the last turn given.
        var round: UInt64 = 0
        var generations: UInt32 = 0
        var orders: UInt64 = 0

        var isIdle: Bool { live.isEmpty && placed.isEmpty }

        /// Gives `key` a turn at `pass` (at least the current round), replacing its live turn.
        mutating func giveTurn(_ key: String, priority: Int8, pass: UInt64) {
            generations &+= 1
            orders += 1
            turnOf[key] = generations
            passOf[key] = max(pass, round)
            turns.insert(
                Turn(priority: priority, pass: max(pass, round), order: orders, key: key, generation: generations))
            // Stale turns go once they outnumber the live ones.
            if turns.count > 64 && turns.count > 2 * turnOf.count {
                turns = Heap(turns.unordered.filter { turnOf[$0.key] == $0.generation })
            }
        }

        /// Forgets a key that has nothing queued and no place.
        mutating func forgetIfIdle(_ key: String) {
            guard live[key] == nil, placed[key] == nil else { return }
            queues[key] = nil
            turnOf[key] = nil
            passOf[key] = nil
        }
    }

    private var rotations: [String: Rotation] = [:]
    /// Live queued jobs per service.
    private(set) var counts: [String: Int] = [:]

    var isEmpty: Bool { counts.isEmpty }
    var total: Int { counts.values.reduce(0, +) }

    func has(_ service: String) -> Bool { counts[service] != nil }

    /// Queued jobs of `key` of `service`.
    func count(of service: String, key: String) -> Int { rotations[service]?.live[key] ?? 0 }

    /// Jobs of `key` of `service` holding a place under their limit.
    func placed(of service: String, key: String) -> Int { rotations[service]?.placed[key] ?? 0 }

    /// Keys of `service` with jobs queued or placed.
    func keyCount(of service: String) -> Int {
        guard let rotation = rotations[service] else { return 0 }
        return Set(rotation.live.keys).union(rotation.placed.keys).count
    }

    /// Queues `job`; its key gets a turn if it has none and is not at its limit, or a better one
    /// if the job has a higher priority than the key's head.
    mutating func insert(_ job: JobBook.Job) {
        let service = job.submission.service
        let key = job.submission.concurrencyKey ?? ""
        let entry = Entry(priority: job.submission.priority, arrival: job.arrival, id: job.id)
        counts[service, default: 0] += 1
        var rotation = rotations.removeValue(forKey: service) ?? Rotation()
        let head = rotation.queues[key]?.min
        rotation.queues[key, default: Heap()].insert(entry)
        rotation.live[key, default: 0] += 1
        let limit = job.submission.concurrencyLimit
        let parked = limit > 0 && rotation.placed[key, default: 0] >= Int(limit)
        if rotation.turnOf[key] == nil {
            if !parked { rotation.giveTurn(key, priority: entry.priority, pass: rotation.passOf[key] ?? 0) }
        } else if let head, entry < head, entry.priority != head.priority {
            // A better head: the key's turn moves up its priority, keeping its pass.
            rotation.giveTurn(key, priority: entry.priority, pass: rotation.passOf[key] ?? rotation.round)
        }
        rotations[service] = rotation
    }

    /// The job whose turn is next in `service`, if a key may go.
    mutating func head(_ service: String, in jobs: [JobID: JobBook.Job]) -> Entry? {
        guard var rotation = rotations.removeValue(forKey: service) else { return nil }
        defer { rotations[service] = rotation }
        return Self.head(of: &rotation, in: jobs)?.entry
    }

    /// Takes the job whose turn is next in `service`; a job with a limit takes a place under
    /// it, held until ``vacate(_:key:)``.
    /// - Returns: its id, and whether it took a place.
    mutating func pop(_ service: String, in jobs: [JobID: JobBook.Job]) -> (id: JobID, placed: Bool)? {
        guard var rotation = rotations.removeValue(forKey: service) else { return nil }
        defer { rotations[service] = rotation.isIdle ? nil : rotation }
        guard let (entry, limit) = Self.head(of: &rotation, in: jobs) else { return nil }
        let turn = rotation.turns.removeMin()
        let key = turn.key
        rotation.round = max(rotation.round, turn.pass)
        rotation.turnOf[key] = nil
        rotation.queues[key]?.removeMin()
        unmark(service, key, in: &rotation)
        if limit > 0 { rotation.placed[key, default: 0] += 1 }
        if rotation.live[key] != nil, let next = rotation.queues[key]?.min {
            rotation.giveTurn(key, priority: next.priority, pass: turn.pass + 1)
        } else {
            rotation.passOf[key] = turn.pass + 1
            rotation.forgetIfIdle(key)
        }
        return (entry.id, limit > 0)
    }

    /// A queued job of `key` of `service` left the queue by other means (cancelled): its entry
    /// stays until it is its key's head.
    mutating func unmark(_ service: String, key: String) {
        guard var rotation = rotations.removeValue(forKey: service) else { return }
        unmark(service, key, in: &rotation)
        rotation.forgetIfIdle(key)
        if !rotation.isIdle { rotations[service] = rotation }
    }

    /// A job of `key` of `service` that took a place (``pop(_:in:)``) left it: it ended, waits
    /// for another attempt, or was queued again. The key gets a turn back if it was parked.
    /// - Returns: whether the key has jobs queued (the caller prepares the service then).
    @discardableResult
    mutating func vacate(_ service: String, key: String) -> Bool {
        guard var rotation = rotations.removeValue(forKey: service) else { return false }
        defer { rotations[service] = rotation.isIdle ? nil : rotation }
        if let placed = rotation.placed[key], placed > 1 {
            rotation.placed[key] = placed - 1
        } else {
            rotation.placed[key] = nil
        }
        guard rotation.live[key] != nil, let head = rotation.queues[key]?.min else {
            rotation.forgetIfIdle(key)
            return false
        }
        if rotation.turnOf[key] == nil {
            rotation.giveTurn(key, priority: head.priority, pass: rotation.passOf[key] ?? 0)
        }
        return true
    }

    private mutating func unmark(_ service: String, _ key: String, in rotation: inout Rotation) {
        if let count = counts[service], count > 1 { counts[service] = count - 1 } else { counts[service] = nil }
        if let live = rotation.live[key], live > 1 {
            rotation.live[key] = live - 1
        } else {
            rotation.live[key] = nil
            rotation.queues[key] = nil
            rotation.turnOf[key] = nil
        }
    }

    /// The live turn at the top of `rotation` and its key's head job, with that job's limit;
    /// stale turns, parked keys and keys whose head changed are dealt with on the way.
    private static func head(
        of rotation: inout Rotation, in jobs: [JobID: JobBook.Job]
    ) -> (entry: Entry, limit: UInt32)? {
        while let turn = rotation.turns.min {
            guard rotation.turnOf[turn.key] == turn.generation else {
                rotation.turns.removeMin()
                continue
            }
            // The key's best live job: cancelled ones at the head go.
            var found: (Entry, UInt32)?
            while let first = rotation.queues[turn.key]?.min {
                if let job = jobs[first.id], job.phase == .queued {
                    found = (first, job.submission.concurrencyLimit)
                    break
                }
                rotation.queues[turn.key]?.removeMin()
            }
            guard let (entry, limit) = found else {
                // Its live count says otherwise only if the book lost track; drop the turn.
                rotation.turns.removeMin()
                rotation.turnOf[turn.key] = nil
                continue
            }
            if limit > 0, rotation.placed[turn.key, default: 0] >= Int(limit) {
                // At its limit: parked until a place is vacated.
                rotation.turns.removeMin()
                rotation.turnOf[turn.key] = nil
                continue
            }
            if entry.priority != turn.priority {
                rotation.turns.removeMin()
                rotation.giveTurn(turn.key, priority: entry.priority, pass: turn.pass)
                continue
            }
            return (entry, limit)
        }
        return nil
    }
}
