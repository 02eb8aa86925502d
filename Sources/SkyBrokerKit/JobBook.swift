import HeapModule
import SkyJournal
import SkyProtocol

/// The durable jobs the broker holds in memory: every unfinished job the journal has (queued,
/// scheduled, being prepared for a delivery, running, between attempts, or being recorded as
/// finished), the submits whose commit is awaited, and the callers waiting to hear about a job.
///
/// The journal is the truth; this is the part of it the broker acts on. A job enters only once
/// its submit is on disk, and leaves once its outcome is.
///
/// A delivery's start is recorded before the job goes to a worker, but not while a credit waits
/// for it: jobs are *prepared* ahead of the credits (their start written while the workers are
/// busy), up to ``pipelineDepth(credits:)`` per service (``pipeline``), so a freed credit takes
/// a prepared job at once instead of idling through a journal commit.
struct JobBook: Sendable {
    enum Phase: Sendable, Equatable {
        /// Not before `due` (the machine's ticks): a delay, a not-before time, or a backoff.
        case scheduled(due: Int64)
        /// In its service's job queue.
        case queued
        /// Taken from the queue for a delivery; the journal is recording its start.
        case preparing
        /// Its start is on disk; it waits in ``ready`` for a credit.
        case prepared
        /// Its delivery `tag` runs at the worker named `worker` (kept for reports).
        case running(tag: UInt64, worker: String)
        /// Its outcome is being written; waiters hear once it is on disk. Reports show it as
        /// it was before (running if an attempt started, else queued) until then.
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
        /// Order among queued jobs of equal priority and key (the scheduler's submission counter).
        var arrival: UInt64
        /// Order among prepared jobs of equal priority: when it was taken from the queue, so that
        /// the keys' turns (``QueuedJobs``) hold through the pipeline.
        var preparedOrder: UInt64 = 0
        /// It holds a place under its concurrency key's limit (``QueuedJobs/vacate(_:key:)``).
        var holdsPlace = false
        /// When its latest attempt was sent to a worker (wall clock, milliseconds since 1970; 0
        /// before): recorded with its outcome.
        var startedAt: Int64 = 0
        /// When its outcome was known (wall clock, milliseconds; 0 before): written with the
        /// outcome, also when the write is tried again later.
        var endedAt: Int64 = 0
        /// Workers lost while running it, in this run of the broker.
        var losses = 0
        /// What its handlers reported (``JobProgress``), written with its outcome; nil until
        /// a handler reports.
        var progress: JobProgress? = nil
        /// When a `job.progress` event last went out for it (wall clock, milliseconds).
        var progressPublishedAt: Int64 = 0
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

    /// Jobs preparing or prepared per service, best first (priority, then the order they were
    /// taken from the queue). A job that leaves the phase by other
    /// means (cancelled) keeps its entry until it reaches the head, where it is skipped; `counts`
    /// holds only the live ones.
    struct Line: Sendable {
        let phase: Phase
        var heaps: [String: Heap<QueueEntry>] = [:]
        var counts: [String: Int] = [:]

        init(of phase: Phase) { self.phase = phase }

        var isEmpty: Bool { counts.isEmpty }
        var total: Int { counts.values.reduce(0, +) }

        func has(_ service: String) -> Bool { counts[service] != nil }

        mutating func insert(_ job: Job) {
            heaps[job.submission.service, default: Heap()].insert(
                QueueEntry(priority: job.submission.priority, arrival: job.preparedOrder, id: job.id))
            counts[job.submission.service, default: 0] += 1
        }

        /// The best live entry of `service`.
        mutating func head(_ service: String, in jobs: [JobID: Job]) -> QueueEntry? {
            while let first = heaps[service]?.min {
                if jobs[first.id]?.phase == phase { return first }
                heaps[service]?.removeMin()
            }
            heaps[service] = nil
            return nil
        }

        /// Takes the best live entry of `service`.
        mutating func pop(_ service: String, in jobs: [JobID: Job]) -> JobID? {
            guard let first = head(service, in: jobs) else { return nil }
            heaps[service]?.removeMin()
            if heaps[service]?.isEmpty == true { heaps[service] = nil }
            unmark(service)
            return first.id
        }

        /// The worst live entry of `service` (lowest priority, youngest).
        mutating func tail(_ service: String, in jobs: [JobID: Job]) -> QueueEntry? {
            while let last = heaps[service]?.max {
                if jobs[last.id]?.phase == phase { return last }
                heaps[service]?.removeMax()
            }
            heaps[service] = nil
            return nil
        }

        /// Takes the worst live entry of `service`.
        mutating func popTail(_ service: String, in jobs: [JobID: Job]) -> JobID? {
            guard let last = tail(service, in: jobs) else { return nil }
            heaps[service]?.removeMax()
            if heaps[service]?.isEmpty == true { heaps[service] = nil }
            unmark(service)
            return last.id
        }

        /// A job of `service` left the line by other means: its entry stays until it is the head
        /// (or, once no live one is left, goes with the rest: every entry left is stale then).
        mutating func unmark(_ service: String) {
            if let count = counts[service], count > 1 {
                counts[service] = count - 1
            } else {
                counts[service] = nil
                heaps[service] = nil
            }
        }
    }

    /// When a scheduled job becomes due, a held wait must be answered, or a submit still
    /// unconfirmed by the journal must be answered so.
    struct TimerEntry: Comparable, Sendable {
        enum Kind: Sendable {
            /// The scheduled job is due.
            case due
            /// The held wait is answered with the job's report.
            case hold(Waiter)
            /// The submit, if its write is still in flight, is answered `journalUnconfirmed`.
            case confirm(Waiter)
        }

        var due: Int64
        var id: JobID
        var kind: Kind

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.due < rhs.due }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.due == rhs.due && lhs.id == rhs.id }
    }

    /// A caller to answer with the job's report: a wait, a status asked while the outcome is
    /// being written, or a cancel.
    typealias Waiter = JobCaller

    /// A submit whose journal write is in flight.
    struct PendingSubmit: Sendable {
        var job: Job
        /// `nil` once answered `journalUnconfirmed`: the write's result then answers nobody.
        var waiter: Waiter?
        /// How long its key holds after its submit, for a key held for a time (else 0), and
        /// its record, written again if the key was found held by a job older than that.
        var keyFor: UInt64 = 0
        var record: JobRecord?
        /// A call its caller left, being recorded as this job: where it was then.
        var kept: KeptCall? = nil
        /// A retry (`mmi.jobs.retry`) under the retried job's link key: if a retry holds the key
        /// already, it is written again without it (every retry makes a job; the first links).
        var unlinkedIfTaken = false
    }

    /// Where a call its caller left was when the broker took it as a job (``JobScheduler/keep(_:at:caller:into:)``).
    enum KeptCall: Sendable {
        /// Waiting for a worker: it waits as a job.
        case waiting
        /// At a worker, as this delivery: the job runs there (held from the start, so that the
        /// worker's reply finds it even before the record is on disk).
        case running(tag: UInt64)
        /// Answered with this status, but its client could not be reached: the job is recorded
        /// ended.
        case ended(ReplyStatus)
    }

    /// How many milliseconds ago a kept call arrived, was handed to its worker, and was answered
    /// (what it had of them): its record's submit, start and end, as an operator reads them
    /// (`skyctl jobs show`).
    struct KeptCallTimes: Sendable {
        var arrived: Int64 = 0
        var started: Int64? = nil
        var ended: Int64? = nil
    }

    private(set) var jobs: [JobID: Job] = [:]
    /// The held jobs' idempotency keys: a submit that repeats one is answered from memory,
    /// also while the store does not answer (the store stays the authority for jobs no longer
    /// held).
    private var keys: [String: JobID] = [:]
    /// Queued jobs per service, taken round-robin across concurrency keys.
    var queued = QueuedJobs()
    /// The per-key rate limits, calls' and jobs' together: here because preparing a job takes
    /// its key's token; the broker's request queue reaches them here too.
    var keyRates = KeyRateBook()
    /// Jobs taken from the queue so far (``Job/preparedOrder``).
    private var preparations: UInt64 = 0
    /// Prepared jobs per service: their start is on disk; the next free credit takes one.
    var ready = Line(of: .prepared)
    /// Jobs per service whose start is being recorded (taken from ``queued``; a submit's first
    /// start, written with it, is not here: the job is not held before it is on disk). A free
    /// credit waits for the best of them rather than take a prepared job of lower priority.
    var preparing = Line(of: .preparing)
    /// Jobs preparing or prepared, per service; kept up to ``pipelineDepth(credits:)``.
    var pipeline: [String: Int] = [:]
    /// Credits of the workers serving each service (a worker of two services counts in both).
    var credits: [String: Int] = [:]
    var timers = Heap<TimerEntry>()
    private(set) var waiters: [JobID: [Waiter]] = [:]
    private(set) var waiterCount = 0
    /// Waiters per peer: one peer's flood of waits may not take every other's place.
    private var waitsOf = PeerTally()
    /// Every call in ``waiters``, so that one sent again while it waits is held once.
    private var heldCallers: Set<Waiter> = []
    /// Of those, cancels waiting for the outcome they decided: if the journal cannot record it,
    /// they hear so (a cancel answered with the job's state looked done, and was lost with a
    /// broker stopped before the write), where a wait hears the job as it was.
    private var cancellers: Set<Waiter> = []
    var pendingSubmits: [JobID: PendingSubmit] = [:]
    /// Callers whose answer waits for a journal read (a lookup or a listing); a caller's answer
    /// is sent only while it is here, so a read that comes back after the shutdown answered it
    /// answers nobody twice.
    var reads: Set<Waiter> = []
    /// Outcomes whose write failed: written again at the next maintenance. Their jobs report
    /// what they were before their outcome (callers hear an outcome only once it is on disk):
    /// a status hears that at once, a wait waits up to its hold, a cancel hears
    /// `journalUnavailable` (the job has ended: there is nothing left to cancel).
    var unrecorded: Set<JobID> = []
    /// The journal's size on disk at the last look, and whether it is over the limit.
    var journalBytes = 0
    var overLimit = false
    /// Counts for stats and tests.
    var submitted: UInt64 = 0
    /// Running jobs whose last progress report came within a second of their last
    /// `job.progress` event: published when the second is over.
    var progressUnpublished: Set<JobID> = []
    var ended = EndTally()
    var retried: UInt64 = 0

    /// Most callers that may wait for jobs at once; beyond it a wait is answered at once.
    static let maxWaiters = 100_000
    /// Most callers of one peer that may wait at once (``mayHold(_:)``).
    static let maxWaitersPerPeer = 1_000

    /// Bytes of the tasks of the jobs in ``jobs`` (each job's body is held until it ended).
    var heldBytes = 0

    /// Changes a held job in place and returns what `change` returns. Callers name a job they
    /// know is held: a missing one is a broken invariant of the book, which traps with
    /// `invariant` rather than go on with jobs that no longer match the journal.
    @discardableResult
    mutating func update<R>(
        _ id: JobID, _ invariant: @autoclosure () -> String, _ change: (inout Job) -> R
    ) -> R {
        guard let index = jobs.index(forKey: id) else { preconditionFailure("job book: \(invariant()) (job \(id))") }
        return change(&jobs.values[index])
    }

    /// Changes a job in place if the book holds it (a peer's message may name one that ended).
    mutating func updateIfHeld<R>(_ id: JobID, _ change: (inout Job) -> R) -> R? {
        guard let index = jobs.index(forKey: id) else { return nil }
        return change(&jobs.values[index])
    }

    /// A job the broker now holds (recorded, unfinished).
    mutating func hold(_ job: Job) {
        if let old = jobs.updateValue(job, forKey: job.id) { heldBytes -= old.submission.body.count }
        heldBytes += job.submission.body.count
        if let key = job.submission.idempotencyKey { keys[key] = job.id }
    }

    /// A job whose outcome is on disk: the broker no longer holds it.
    mutating func release(_ id: JobID) {
        _ = freePlace(of: id)
        guard let old = jobs.removeValue(forKey: id) else { return }
        heldBytes -= old.submission.body.count
        if let key = old.submission.idempotencyKey, keys[key] == id { keys[key] = nil }
    }

    /// The held job recorded with idempotency key `key`.
    func held(withKey key: String) -> JobID? { keys[key] }

    /// Whether `key` is a unique job's (recorded behind ``JobSubmission/uniqueKeyPrefix``).
    static func isUniqueKey(_ key: String?) -> Bool {
        key?.hasPrefix(JobSubmission.uniqueKeyPrefix) == true
    }

    /// Whether `key` is held while its job waits or runs, and so goes with its end.
    static func releasesKeyAtEnd(_ key: String?) -> Bool {
        guard let key else { return false }
        return key.hasPrefix(JobSubmission.recordedPrefix(of: .whileQueued))
            || key.hasPrefix(JobSubmission.recordedPrefix(of: .whileRunning))
    }

    /// A held unique job gives up its key: a submit with it makes a new job from now on.
    /// With `heldWhileQueued`, only a key held while the job waits.
    /// - Returns: whether it held such a key.
    mutating func releaseKey(of id: JobID, heldWhileQueued: Bool) -> Bool {
        guard let index = jobs.index(forKey: id), let key = jobs.values[index].submission.idempotencyKey,
            Self.isUniqueKey(key), !heldWhileQueued || key.hasPrefix(JobSubmission.recordedPrefix(of: .whileQueued))
        else { return false }
        jobs.values[index].submission.idempotencyKey = nil
        if keys[key] == id { keys[key] = nil }
        return true
    }

    /// Puts a job in its service's queue (giving up its place under its key's limit, if it
    /// held one).
    mutating func enqueue(_ id: JobID) {
        _ = freePlace(of: id)
        guard let index = jobs.index(forKey: id) else { return }
        jobs.values[index].phase = .queued
        queued.insert(jobs.values[index])
    }

    /// Jobs a service's pipeline holds at most: enough that the credits freed during one
    /// journal commit (about a millisecond, a few jobs per credit for short tasks) find a
    /// prepared job; none while no worker serves it. Measured with `skybench --jobs`: 2 × the
    /// credits served short jobs a fifth slower than 4 ×. At most ``maxPipelineDepth``, however
    /// many credits workers announce (65,536 each): prepared starts count as attempts if the
    /// broker dies, and each is a journal write.
    static func pipelineDepth(credits: Int) -> Int { credits > 0 ? min(maxPipelineDepth, max(32, 4 * credits)) : 0 }

    static let maxPipelineDepth = 1024

    /// Takes the best queued job of `service` to prepare its delivery, if the service's
    /// pipeline has room.
    mutating func takeToPrepare(_ service: String) -> JobID? {
        guard pipeline[service, default: 0] < Self.pipelineDepth(credits: credits[service, default: 0]),
            let (id, placed) = queued.pop(service, in: jobs, rates: &keyRates)
        else { return nil }
        pipeline[service, default: 0] += 1
        preparations += 1
        let job = update(id, "a job in the queued line is held") { [preparations] job in
            job.phase = .preparing
            job.preparedOrder = preparations
            job.holdsPlace = placed
            return job
        }
        preparing.insert(job)
        return id
    }

    /// Takes back the worst prepared (or preparing) start of `service` when its pipeline is
    /// full and a queued job of higher priority waits behind it: the pipeline is filled by
    /// order of arrival, so without this a burst of low-priority jobs would take every place
    /// and run before high-priority jobs submitted while they still waited. The job is queued
    /// again at its old place; the caller takes its attempt back, in memory and on disk.
    /// Equal priorities never trade places (a freed credit would then wait for a commit).
    mutating func releaseForBetter(_ service: String) -> JobID? {
        let depth = Self.pipelineDepth(credits: credits[service, default: 0])
        guard depth > 0, pipeline[service, default: 0] >= depth,
            let best = queued.head(service, in: jobs, rates: &keyRates)
        else {
            return nil
        }
        let inReady = ready.tail(service, in: jobs)
        let inPreparing = preparing.tail(service, in: jobs)
        let fromReady: Bool
        switch (inReady, inPreparing) {
        case (nil, nil): return nil
        case (.some, nil): fromReady = true
        case (nil, .some): fromReady = false
        case (.some(let a), .some(let b)): fromReady = b < a
        }
        guard let worst = fromReady ? inReady : inPreparing, best.priority > worst.priority,
            let id = fromReady ? ready.popTail(service, in: jobs) : preparing.popTail(service, in: jobs)
        else { return nil }
        leavePipeline(service)
        enqueue(id)
        return id
    }

    /// Takes back the worst prepared (or preparing) start of `service`, whatever waits: its
    /// service was paused. The job is queued again.
    mutating func releaseAny(_ service: String) -> JobID? {
        guard let id = ready.popTail(service, in: jobs) ?? preparing.popTail(service, in: jobs) else { return nil }
        leavePipeline(service)
        enqueue(id)
        return id
    }

    /// Whether a job of `service` whose start is being recorded has a higher priority than its
    /// best prepared one: a free credit then waits for it (one commit) instead.
    mutating func betterIsPreparing(_ service: String) -> Bool {
        guard preparing.has(service), let coming = preparing.head(service, in: jobs),
            let ready = ready.head(service, in: jobs)
        else { return false }
        return coming.priority > ready.priority
    }

    /// Takes a place in the pipeline of `service` for a job being submitted, if it would be
    /// prepared at once (the pipeline has room and no queued job comes first): its first start
    /// is then written with its submit, one journal write instead of two. The place is given
    /// back (``leavePipeline(_:)``) if the submit is not written.
    /// A job with a concurrency limit goes through the queue, which counts its key's places;
    /// one whose key has no rate token goes there too, and waits for it.
    mutating func reserveStart(_ submission: JobSubmission) -> Bool {
        let service = submission.service
        guard submission.concurrencyLimit == 0, !queued.has(service),
            pipeline[service, default: 0] < Self.pipelineDepth(credits: credits[service, default: 0]),
            keyRates.isEmpty || keyRates.take(service, key: submission.concurrencyKey ?? "")
        else { return false }
        pipeline[service, default: 0] += 1
        return true
    }

    /// A job's start is on disk: it waits for a credit.
    mutating func prepared(_ id: JobID) {
        guard let index = jobs.index(forKey: id), jobs.values[index].phase == .preparing else { return }
        preparing.unmark(jobs.values[index].submission.service)
        jobs.values[index].phase = .prepared
        ready.insert(jobs.values[index])
    }

    /// A job whose first start was written with its submit is on disk: held, it waits for a
    /// credit (it was never in ``preparing``).
    mutating func preparedWithSubmit(_ job: Job) {
        var job = job
        job.phase = .prepared
        preparations += 1
        job.preparedOrder = preparations
        hold(job)
        ready.insert(job)
    }

    /// A job that held a place under its concurrency key's limit gives it up: it ended, waits
    /// for another attempt, or is queued again.
    /// - Returns: its service, if jobs of its key wait for the place (prepare the service then).
    mutating func freePlace(of id: JobID) -> String? {
        guard let index = jobs.index(forKey: id), jobs.values[index].holdsPlace else { return nil }
        jobs.values[index].holdsPlace = false
        let submission = jobs.values[index].submission
        let waiting = queued.vacate(submission.service, key: submission.concurrencyKey ?? "", in: jobs)
        return waiting ? submission.service : nil
    }

    /// A job left the pipeline of `service` (sent, or cancelled while preparing or prepared).
    mutating func leavePipeline(_ service: String) {
        if let count = pipeline[service], count > 1 {
            pipeline[service] = count - 1
        } else {
            pipeline[service] = nil
        }
    }

    func hasWaiters(_ id: JobID) -> Bool {
        waiters[id] != nil
    }

    /// Holds `waiter` until `id`'s outcome; `false` if the same call (peer, request id and
    /// attempt) waits already, which is answered once.
    @discardableResult
    mutating func addWaiter(_ waiter: Waiter, for id: JobID, cancelling: Bool = false) -> Bool {
        guard heldCallers.insert(waiter).inserted else { return false }
        if cancelling { cancellers.insert(waiter) }
        waiters[id, default: []].append(waiter)
        waiterCount += 1
        waitsOf.add(waiter.peer)
        return true
    }

    /// Whether a wait of `caller` may be held: within ``maxWaiters`` in all and
    /// ``maxWaitersPerPeer`` of its peer (beyond, a wait is answered at once).
    func mayHold(_ caller: Waiter) -> Bool {
        waiterCount < Self.maxWaiters && waitsOf[caller.peer] < Self.maxWaitersPerPeer
    }

    private mutating func released(_ waiter: Waiter) {
        waiterCount -= 1
        waitsOf.remove(waiter.peer)
        heldCallers.remove(waiter)
        if !cancellers.isEmpty { cancellers.remove(waiter) }
    }

    /// Whether `waiter` is a cancel waiting for the outcome it decided.
    func isCancelling(_ waiter: Waiter) -> Bool { cancellers.contains(waiter) }

    /// Takes one waiter of a job, if it still waits.
    mutating func removeWaiter(_ waiter: Waiter, of id: JobID) -> Bool {
        guard let entry = waiters.index(forKey: id), let index = waiters.values[entry].firstIndex(of: waiter) else {
            return false
        }
        waiters.values[entry].remove(at: index)
        if waiters.values[entry].isEmpty { waiters.remove(at: entry) }
        released(waiter)
        return true
    }

    /// Takes every waiter of a job.
    mutating func takeWaiters(of id: JobID) -> [Waiter] {
        let taken = waiters.removeValue(forKey: id) ?? []
        for waiter in taken { released(waiter) }
        return taken
    }
}
