import HeapModule
import SkyJournal
import SkyProtocol

/// The queued jobs of every service, each service's taken in the order of its ``KeyTurns``:
/// round-robin across concurrency keys (``SkyProtocol/JobSubmission/concurrencyKey``),
/// priorities first, each key held to its jobs' limit and to its per-key rate limit if the
/// service has one (``KeyRateBook``: a key out of tokens rests). Jobs without a key take their
/// turns as the key "".
struct QueuedJobs: Sendable {
    typealias Entry = JobBook.QueueEntry

    /// One service's queued jobs by key, and their rotation.
    private struct Rotation: Sendable {
        /// Each key's queued jobs, best first; a cancelled job's entry stays until it is the head.
        var queues: [String: Heap<Entry>] = [:]
        /// Live entries per key.
        var live: [String: Int] = [:]
        var turns = KeyTurns()

        var isIdle: Bool { live.isEmpty && turns.isIdle }

        /// `key`'s best live job and its limit; cancelled jobs at its head go.
        mutating func head(_ key: String, in jobs: [JobID: JobBook.Job]) -> (entry: Entry, limit: UInt32)? {
            guard live[key] != nil else { return nil }
            while let first = queues[key]?.min {
                if let job = jobs[first.id], job.phase == .queued { return (first, job.submission.concurrencyLimit) }
                queues[key]?.removeMin()
            }
            return nil
        }

        /// The key whose turn is next and its head, if a key may go; a key of `service` without
        /// a rate token rests.
        mutating func next(
            in jobs: [JobID: JobBook.Job], service: String, rates: inout KeyRateBook
        ) -> (key: String, entry: Entry, limit: UInt32)? {
            while let key = turns.top() {
                let head = head(key, in: jobs)
                guard
                    turns.confirm(key, head: head.map { KeyTurns.Head(priority: $0.entry.priority, limit: $0.limit) }),
                    let head
                else { continue }
                if rates.isEmpty || rates.mayStart(service, key: key) { return (key, head.entry, head.limit) }
                turns.rest(key)
            }
            return nil
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
    func placed(of service: String, key: String) -> Int { rotations[service]?.turns.placed[key] ?? 0 }

    /// Each key of `service` with jobs queued or placed: how many of each.
    func keys(of service: String) -> [String: (waiting: Int, placed: Int)] {
        rotations[service].map { $0.turns.counts(waiting: $0.live) } ?? [:]
    }

    /// Keys of `service` with jobs queued or placed.
    func keyCount(of service: String) -> Int { rotations[service]?.turns.keyCount ?? 0 }

    /// Queues `job`.
    mutating func insert(_ job: JobBook.Job) {
        let service = job.submission.service
        let key = job.submission.concurrencyKey ?? ""
        let entry = Entry(priority: job.submission.priority, arrival: job.arrival, id: job.id)
        counts[service, default: 0] += 1
        var rotation = rotations.removeValue(forKey: service) ?? Rotation()
        rotation.queues[key, default: Heap()].insert(entry)
        rotation.live[key, default: 0] += 1
        // The head's priority, as far as the key's heap knows (a cancelled head is found later).
        let best = rotation.queues[key]!.min!
        let limit = best.id == job.id ? job.submission.concurrencyLimit : 0
        rotation.turns.arrived(key, head: KeyTurns.Head(priority: best.priority, limit: limit))
        rotations[service] = rotation
    }

    /// The job whose turn is next in `service`, if a key may go.
    mutating func head(_ service: String, in jobs: [JobID: JobBook.Job], rates: inout KeyRateBook) -> Entry? {
        guard var rotation = rotations.removeValue(forKey: service) else { return nil }
        defer { rotations[service] = rotation }
        return rotation.next(in: jobs, service: service, rates: &rates)?.entry
    }

    /// Takes the job whose turn is next in `service` (its key's rate token, if the service is
    /// limited per key); a job with a limit takes a place under it, held until
    /// ``vacate(_:key:in:)``.
    /// - Returns: its id, and whether it took a place.
    mutating func pop(
        _ service: String, in jobs: [JobID: JobBook.Job], rates: inout KeyRateBook
    ) -> (id: JobID, placed: Bool)? {
        guard var rotation = rotations.removeValue(forKey: service) else { return nil }
        defer { rotations[service] = rotation.isIdle ? nil : rotation }
        guard let (key, entry, limit) = rotation.next(in: jobs, service: service, rates: &rates) else { return nil }
        if !rates.isEmpty { _ = rates.take(service, key: key) }
        rotation.queues[key]?.removeMin()
        unmark(service, key, in: &rotation)
        let next = rotation.head(key, in: jobs).map { KeyTurns.Head(priority: $0.entry.priority, limit: $0.limit) }
        rotation.turns.took(key, limited: limit > 0, next: next)
        return (entry.id, limit > 0)
    }

    /// A queued job of `key` of `service` left the queue by other means (cancelled): its entry
    /// stays until it is its key's head.
    mutating func unmark(_ service: String, key: String) {
        guard var rotation = rotations.removeValue(forKey: service) else { return }
        unmark(service, key, in: &rotation)
        if rotation.live[key] == nil { rotation.turns.emptied(key) }
        if !rotation.isIdle { rotations[service] = rotation }
    }

    /// A key of `service` that rested for a rate token may go again: it gets its turn back.
    /// - Returns: whether jobs of the key are queued (the caller prepares the service then).
    @discardableResult
    mutating func restore(_ service: String, key: String, in jobs: [JobID: JobBook.Job]) -> Bool {
        guard var rotation = rotations.removeValue(forKey: service) else { return false }
        defer { rotations[service] = rotation.isIdle ? nil : rotation }
        let head = rotation.head(key, in: jobs).map { KeyTurns.Head(priority: $0.entry.priority, limit: $0.limit) }
        rotation.turns.restore(key, head: head)
        return head != nil
    }

    /// A job of `key` of `service` that took a place (``pop(_:in:)``) left it: it ended, waits
    /// for another attempt, or was queued again. The key gets a turn back if it was parked.
    /// - Parameter jobs: the jobs held, to find the key's head.
    /// - Returns: whether the key has jobs queued (the caller prepares the service then).
    @discardableResult
    mutating func vacate(_ service: String, key: String, in jobs: [JobID: JobBook.Job]) -> Bool {
        guard var rotation = rotations.removeValue(forKey: service) else { return false }
        defer { rotations[service] = rotation.isIdle ? nil : rotation }
        let head = rotation.head(key, in: jobs).map { KeyTurns.Head(priority: $0.entry.priority, limit: $0.limit) }
        return rotation.turns.vacate(key, head: head)
    }

    private mutating func unmark(_ service: String, _ key: String, in rotation: inout Rotation) {
        if let count = counts[service], count > 1 { counts[service] = count - 1 } else { counts[service] = nil }
        if let live = rotation.live[key], live > 1 {
            rotation.live[key] = live - 1
        } else {
            rotation.live[key] = nil
            rotation.queues[key] = nil
        }
    }
}
