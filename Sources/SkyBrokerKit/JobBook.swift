import HeapModule
import SkyJournal
import SkyProtocol

/// The durable jobs the broker holds in memory: every unfinished job the journal has (queued,
/// scheduled, starting, running, between attempts, or being recorded as finished), the submits
/// whose commit is awaited, and the callers waiting to hear about a job.
///
/// The journal is the truth; this is the part of it the broker acts on. A job enters only once
/// its submit is on disk, and leaves once its outcome is.
struct JobBook: Sendable {
    enum Phase: Sendable, Equatable {
        /// Not before `due` (the machine's ticks): a delay, a not-before time, or a backoff.
        case scheduled(due: Int64)
        /// In its service's job queue.
        case queued
        /// Given to a worker; the journal is recording the start, after which it is sent.
        case starting(PeerID, tag: UInt64)
        case running(PeerID, tag: UInt64)
        /// Its outcome is being written; waiters hear once it is on disk.
        case finishing(JobReport)
    }

    struct Job: Sendable {
        var id: JobID
        var submission: JobSubmission
        /// Executions started so far, over every run of the broker.
        var attempt: UInt32
        /// Wall-clock not-before (milliseconds since 1970), for reports.
        var notBefore: Int64
        var phase: Phase
        /// Order among waiting jobs and requests (the machine's arrival counter).
        var arrival: UInt64
        /// Workers lost while running it, in this run of the broker.
        var losses = 0
        /// The submit's trace frame, so its executions join the submitter's trace (kept in
        /// memory only: executions after a broker restart start traces of their own).
        var trace: [UInt8]? = nil
    }

    /// A job waiting for a worker. Higher priority first, then older first.
    struct QueueEntry: Comparable, Sendable {
        var priority: Int8
        var arrival: UInt64
        var id: JobID

        static func < (lhs: Self, rhs: Self) -> Bool {
            lhs.priority != rhs.priority ? lhs.priority > rhs.priority : lhs.arrival < rhs.arrival
        }
    }

    /// When a scheduled job becomes due, or a held wait must be answered.
    struct TimerEntry: Comparable, Sendable {
        var due: Int64
        var id: JobID
        /// The waiter to answer, for a hold; `nil` for a scheduled job.
        var waiter: Waiter?

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.due < rhs.due }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.due == rhs.due && lhs.id == rhs.id }
    }

    /// A caller to answer with the job's report: a wait, a status asked while the outcome is
    /// being written, or a cancel.
    typealias Waiter = JobCaller

    /// A submit whose journal write is in flight.
    struct PendingSubmit: Sendable {
        var job: Job
        var waiter: Waiter
    }

    var jobs: [JobID: Job] = [:]
    /// Queued jobs per service. Entries whose job left the queue (cancelled) are skipped.
    var queues: [String: Heap<QueueEntry>] = [:]
    /// Live entries in ``queues``, per service.
    var queuedByService: [String: Int] = [:]
    var timers = Heap<TimerEntry>()
    var waiters: [JobID: [Waiter]] = [:]
    var waiterCount = 0
    var pendingSubmits: [JobID: PendingSubmit] = [:]
    /// Outcomes whose write failed: written again at the next maintenance.
    var unrecorded: [JobID] = []
    /// The journal's size on disk at the last look, and whether it is over the limit.
    var journalBytes = 0
    var overLimit = false
    /// Counts for stats and tests.
    var submitted: UInt64 = 0
    var succeeded: UInt64 = 0
    var failed: UInt64 = 0
    var cancelled: UInt64 = 0
    var retried: UInt64 = 0

    /// Most callers that may wait for jobs at once; beyond it a wait is answered at once.
    static let maxWaiters = 100_000

    /// Bytes of the tasks of the jobs in ``jobs`` (each job's body is held until it ended).
    var heldBytes = 0

    /// A job the broker now holds (recorded, unfinished).
    mutating func hold(_ job: Job) {
        if let old = jobs.updateValue(job, forKey: job.id) { heldBytes -= old.submission.body.count }
        heldBytes += job.submission.body.count
    }

    /// A job whose outcome is on disk: the broker no longer holds it.
    mutating func release(_ id: JobID) {
        if let old = jobs.removeValue(forKey: id) { heldBytes -= old.submission.body.count }
    }

    /// Puts a job in its service's queue.
    mutating func enqueue(_ id: JobID) {
        guard var job = jobs[id] else { return }
        job.phase = .queued
        jobs[id] = job
        queues[job.submission.service, default: Heap()].insert(
            QueueEntry(priority: job.submission.priority, arrival: job.arrival, id: id))
        queuedByService[job.submission.service, default: 0] += 1
    }

    /// The head of a service's job queue (skipping entries of jobs no longer queued).
    mutating func head(_ service: String) -> QueueEntry? {
        while let first = queues[service]?.min {
            if jobs[first.id]?.phase == .queued { return first }
            queues[service]?.removeMin()
        }
        queues[service] = nil
        return nil
    }

    /// Takes the head of a service's job queue.
    mutating func pop(_ service: String) -> Job? {
        guard let first = head(service) else { return nil }
        queues[service]?.removeMin()
        if queues[service]?.isEmpty == true { queues[service] = nil }
        unmarkQueued(service)
        return jobs[first.id]
    }

    /// A queued job leaves its queue (cancelled): its entry stays until it reaches the head.
    mutating func unmarkQueued(_ service: String) {
        if let count = queuedByService[service], count > 1 {
            queuedByService[service] = count - 1
        } else {
            queuedByService[service] = nil
        }
    }

    mutating func addWaiter(_ waiter: Waiter, for id: JobID) {
        waiters[id, default: []].append(waiter)
        waiterCount += 1
    }

    /// Takes one waiter of a job, if it still waits.
    mutating func removeWaiter(_ waiter: Waiter, of id: JobID) -> Bool {
        guard let index = waiters[id]?.firstIndex(of: waiter) else { return false }
        waiters[id]!.remove(at: index)
        if waiters[id]!.isEmpty { waiters[id] = nil }
        waiterCount -= 1
        return true
    }

    /// Takes every waiter of a job.
    mutating func takeWaiters(of id: JobID) -> [Waiter] {
        let taken = waiters.removeValue(forKey: id) ?? []
        waiterCount -= taken.count
        return taken
    }
}
