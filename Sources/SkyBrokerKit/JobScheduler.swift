import HeapModule
import SkyJournal
import SkyProtocol

/// Durable jobs: `mmi.jobs.*` requests, the journal's answers, and the attempts of jobs; a
/// sub-machine of ``BrokerStateMachine`` with state of its own (``JobBook``, private to this
/// file), its own inputs (the methods below) and actions (``Action``), as postgres-nio's pool
/// state machine keeps its request queue and its connections apart.
///
/// A job is recorded before anything else happens to it: the submit is answered, and the job
/// queued, once the journal has it on disk. Each delivery is recorded before it is sent (so a
/// job's `attempt` counts every execution, also across broker restarts), and the outcome is
/// recorded once; callers waiting for it hear when it is on disk. Deliveries are recorded ahead
/// of the credits that will take them (up to ``JobBook/pipelineDepth(credits:)`` per service),
/// so a credit never waits for a commit: a broker killed meanwhile counts those prepared
/// deliveries as attempts although they never reached a worker. Jobs wait in their own
/// per-service queues, higher priority first. They are bounded by the journal
/// (`--journal-max-bytes`) and by ``Configuration/maxHeldJobs``, not by the request queue's
/// limits, and are not subject to `--max-wait` or the no-workers grace: a job waits until a
/// worker serves it.
///
/// **What it leaves to the broker.** Workers, credits and sockets. The scheduler asks the
/// broker to offer a service's prepared jobs to its workers (``Action/offer(service:)``); the
/// broker takes one (``take(_:)``) for a free credit, which it gives to waiting requests first
/// (a caller waits on a deadline, a job on disk), and says which delivery it went out as
/// (``dispatched(_:tag:worker:into:)``); it tells how each attempt ended, and which workers
/// joined and left. Time is the broker's: nanoseconds after its epoch, carried by each input
/// that needs it. Wall-clock facts (job ids, not-before times, retention) come from
/// ``Configuration/wallClock``, since they outlive the process.
struct JobScheduler: Sendable {
    let configuration: Configuration
    /// The jobs held in memory (read by the broker's snapshots and tests).
    var book = JobBook()
    /// The schedules (``ScheduleBook``), whose ticks this scheduler records as jobs.
    var schedules = ScheduleBook()
    /// The flows (``FlowBook``), whose steps this scheduler runs as jobs.
    var flows = FlowBook()
    /// The bulk action under way, if any (``bulkRequest(_:from:into:)``).
    var bulk: BulkRun?
    /// Services paused: their jobs are neither prepared nor taken (the broker says which).
    var paused: Set<String> = []
    /// Services whose rate limit has no token now: their prepared jobs are not taken until the
    /// broker says (``BrokerStateMachine/rateWake(now:into:)``).
    var throttled: Set<String> = []
    var idGenerator: SplitMix64
    /// Orders jobs of equal priority by submission.
    private var nextArrival: UInt64 = 0
    /// When the journal is next asked to expire outcomes and to measure itself.
    private var nextMaintenance: Int64?
    /// The counts of jobs the journal holds (saved, or read at start); `nil` when a save failed
    /// and what the journal holds is not known.
    private var savedTotals: JobTotals? = JobTotals()
    /// The broker is stopping: job requests are answered `brokerShuttingDown`.
    private(set) var stopping = false
    /// Journal writes that failed since the start, and whether the last one did (``counts``).
    private(set) var journalFailures: UInt64 = 0
    private(set) var journalFailing = false
    /// When the journal last did something it was asked: a store that works through a backlog
    /// keeps its submitters waiting their turn; only one silent for a submit's bound has that
    /// submit answered `journalUnconfirmed` (``tick(now:budget:into:)``).
    private var lastJournalSuccess = Int64.min

    /// Expired jobs deleted per maintenance: small transactions, so that expiry never holds up
    /// the journal's other writes for long.
    static let expiryBatch = 1000

    static let noJournal =
        "this broker keeps no journal, so it takes no jobs: start skybroker with --state-dir (scan works without one)"

    init(configuration: Configuration, seed: UInt64) {
        self.configuration = configuration
        idGenerator = SplitMix64(seed: seed)
    }

    // MARK: Queries

    /// Jobs held (unfinished).
    var heldCount: Int { book.jobs.count }

    /// Whether any prepared job waits for a credit.
    var hasPrepared: Bool { !book.ready.isEmpty }

    /// Whether a prepared job of `service` waits for a credit.
    func hasPrepared(for service: String) -> Bool { book.ready.has(service) }

    /// Whether jobs of `service` are queued or prepared.
    func hasWork(for service: String) -> Bool { book.queued.has(service) || book.ready.has(service) }

    /// The counts of jobs as the journal last saved them (``JobTotals``): counted on from there.
    mutating func totalsAtStart(_ totals: JobTotals) {
        book.submitted = totals.submitted
        book.ended = EndTally(succeeded: totals.succeeded, failed: totals.failed, cancelled: totals.cancelled)
        book.retried = totals.retried
        savedTotals = totals
    }

    /// The counts of jobs now.
    var totals: JobTotals {
        JobTotals(
            submitted: book.submitted, succeeded: book.ended.succeeded, failed: book.ended.failed,
            cancelled: book.ended.cancelled, retried: book.retried)
    }

    /// The counts of jobs for the journal's maintenance to save, if they changed since the last
    /// save (the broker's shell saves them once more when it stops).
    private mutating func totalsToSave() -> JobTotals? {
        let now = totals
        guard now != savedTotals else { return nil }
        savedTotals = now
        return now
    }

    /// A maintenance failed: its counts are saved again by the next, changed or not (they were
    /// marked saved when it was asked, and a broker killed before the next change of a count
    /// started again from older ones).
    private mutating func unsavedTotals() { savedTotals = nil }

    /// The jobs' counts for stats and snapshots; `nil` without a journal.
    /// - Parameter keptWaiters: callers the broker holds waiting on kept calls in flight.
    func counts(keptWaiters: Int = 0) -> JobCounts? {
        guard configuration.journal else { return nil }
        return JobCounts(
            held: book.jobs.count, queued: book.queued.total + book.pipeline.values.reduce(0, +),
            submitted: book.submitted, succeeded: book.ended.succeeded, failed: book.ended.failed,
            cancelled: book.ended.cancelled,
            retried: book.retried, journalBytes: book.journalBytes, waiters: book.waiterCount + keptWaiters,
            schedules: schedules.loaded ? schedules.counts : nil, flows: flows.counts,
            journalFailures: journalFailures, journalFailing: journalFailing)
    }

    // MARK: Requests

    /// An `mmi.jobs.*` request from `caller`; `false` if `request` names no job service.
    mutating func request(
        _ request: TaskRequest, from caller: JobCaller, now: Int64, into actions: inout [Action]
    ) -> Bool {
        if BrokerService.scheduleServices.contains(request.service) {
            scheduleRequest(request, from: caller, into: &actions)
            return true
        }
        if BrokerService.flowServices.contains(request.service) {
            flowRequest(request, from: caller, now: now, into: &actions)
            return true
        }
        if stopping, BrokerService.jobServices.contains(request.service) {
            // Nothing held now would be answered: the caller asks the broker that comes back.
            answer(caller, .brokerShuttingDown, "the broker is shutting down", into: &actions)
            return true
        }
        switch request.service {
        case BrokerService.jobSubmit:
            submit(request.body, trace: request.trace, caller: caller, now: now, into: &actions)
        case BrokerService.jobStatus, BrokerService.jobWait, BrokerService.jobCancel, BrokerService.jobRetry:
            guard let id = JobID(bytes: request.body) else {
                answer(
                    caller, .invalidPayload,
                    "\(request.service) takes a 16-byte job id; got \(request.body.count) bytes", into: &actions)
                return true
            }
            switch request.service {
            case BrokerService.jobStatus: answerAbout(id, to: caller, holding: nil, now: now, into: &actions)
            case BrokerService.jobWait:
                answerAbout(id, to: caller, holding: configuration.waitHold, now: now, into: &actions)
            case BrokerService.jobCancel: cancel(id, caller: caller, into: &actions)
            default: retry(id, caller: caller, into: &actions)
            }
        case BrokerService.jobBulk:
            bulkRequest(request, from: caller, into: &actions)
        case BrokerService.jobDescribe:
            describe(request.body, caller: caller, into: &actions)
        case BrokerService.jobList:
            guard configuration.journal else {
                answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
                return true
            }
            do {
                let query = try JobQuery(decoding: request.body)
                guard startRead(for: caller, into: &actions) else { return true }
                actions.append(
                    .journal(
                        .list(
                            state: query.state.flatMap(Self.journalState), service: query.service,
                            limit: Int(query.limit), caller)))
            } catch {
                answer(caller, .invalidPayload, "\(request.service): \(error)", into: &actions)
            }
        default:
            return false
        }
        return true
    }

    private mutating func submit(
        _ body: [UInt8], trace: [UInt8]?, caller: JobCaller, now: Int64, into actions: inout [Action]
    ) {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        var submission: JobSubmission
        do {
            submission = try JobSubmission(decoding: body)
        } catch {
            answer(caller, .invalidPayload, "mmi.jobs.submit: \(error)", into: &actions)
            return
        }
        for (prefix, use) in [
            (Self.tickKeyPrefix, "its schedules' ticks"), (JobSubmission.uniqueKeyPrefix, "unique jobs"),
            (FlowSpec.stepKeyPrefix, "flows' steps"), (Self.retryKeyPrefix, "bulk retries"),
        ]
        where submission.idempotencyKey?.hasPrefix(prefix) == true {
            answer(
                caller, .invalidPayload,
                "mmi.jobs.submit: idempotency keys starting with \(prefix) are the broker's, for \(use); use another key",
                into: &actions)
            return
        }
        // A unique job's key is recorded behind its hold's prefix: from here on it is an
        // idempotency key that the job gives up when it is sent (``dispatched``) or ends
        // (``writeOutcome``).
        let keyFor = submission.keyHold == .forTime ? submission.keyHoldMilliseconds : 0
        // The key lives in the job's record: kept at least as long as the key holds, whatever
        // retention the submitter asked for.
        submission.retentionMilliseconds = max(submission.retentionMilliseconds, keyFor)
        submission.idempotencyKey = submission.recordedKey
        submission.keyHold = .kept
        submission.keyHoldMilliseconds = 0
        var expired: JobID?
        if let key = submission.idempotencyKey, let held = book.held(withKey: key) {
            if keyFor > 0, held.milliseconds + Int64(clamping: keyFor) <= configuration.wallClock() {
                // A key held for a time that passed: the new job takes it.
                expired = held
            } else {
                // A repeat (a client's retry, often after a lost answer) of a job the broker
                // holds: answered with it, without asking the store, which may not answer now.
                answer(caller, id: held.bytes, into: &actions)
                return
            }
        }
        if book.overLimit {
            actions.append(.count(.refusedOverloaded))
            answer(
                caller, .overloaded,
                "the journal holds \(book.journalBytes) bytes, over its limit of \(configuration.journalMaxBytes) (--journal-max-bytes): new jobs are refused until results expire or are deleted (skyctl jobs bulk delete)",
                into: &actions)
            return
        }
        if book.pendingSubmits.count >= configuration.inFlightLimit {
            actions.append(.count(.refusedOverloaded))
            answer(
                caller, .overloaded,
                "\(book.pendingSubmits.count) submits await the journal, the most --queue-limit (\(configuration.inFlightLimit)) allows",
                into: &actions)
            return
        }
        if book.jobs.count >= configuration.maxHeldJobs || book.heldBytes >= configuration.maxHeldJobBytes {
            actions.append(.count(.refusedOverloaded))
            answer(
                caller, .overloaded,
                "the broker holds \(book.jobs.count) unfinished jobs (\(book.heldBytes) bytes of tasks), its limit (\(configuration.maxHeldJobs) jobs, \(configuration.maxHeldJobBytes) bytes): new jobs are refused until workers catch up",
                into: &actions)
            return
        }
        if submission.service.hasPrefix(BrokerService.prefix) {
            answer(caller, .unknownService, "a job cannot run the broker's own \(submission.service)", into: &actions)
            return
        }
        if case .failure(let problem)? = payloadKey(submission) {
            answer(caller, .invalidPayload, "mmi.jobs.submit: \(problem.message)", into: &actions)
            return
        }
        if let expired { _ = book.releaseKey(of: expired, heldWhileQueued: false) }
        let (id, record) = pend(submission, trace: trace, waiter: caller, keyFor: keyFor)
        actions.append(
            .journal(.write((expired.map { [.keyExpired(id: $0.bytes)] } ?? []) + [.submitted(record)], .submitted(id)))
        )
        if submission.confirmWithinMilliseconds > 0 {
            // The journal's answer may take as long as a server that hangs lets it (seconds): a
            // submitter that asked is answered "not confirmed" at its bound instead, and the
            // write's result, when it comes, answers nobody (``submitted(_:_:now:into:)``).
            let due = now + Int64(submission.confirmWithinMilliseconds) * 1_000_000
            book.timers.insert(JobBook.TimerEntry(due: due, id: id, kind: .confirm(caller)))
        }
    }

    /// A new job, pending until its write (which the caller makes) is answered: `waiter`, if
    /// any, hears then (``submitted(_:_:now:into:)``).
    /// With `keyFor`, the job's key holds that many milliseconds after its submit: a key
    /// found taken by an older job is taken from it (``submitted(_:_:now:into:)``).
    /// `id`: the job's id when it is not the broker's to make (a kept call's); `mayStart`: its
    /// first start may be written with it.
    mutating func pend(
        _ submission: JobSubmission, id given: JobID? = nil, trace: [UInt8]? = nil, waiter: JobCaller?,
        keyFor: UInt64 = 0, mayStart: Bool = true
    ) -> (JobID, JobRecord) {
        var submission = submission
        // Kept with the job: a restarted broker queues it under the same key.
        if case .success(let key)? = payloadKey(submission) { submission.concurrencyKey = key }
        let wall = configuration.wallClock()
        let id = given ?? JobID(milliseconds: wall, random: &idGenerator)
        let (delayed, overflow) = wall.addingReportingOverflow(Int64(clamping: submission.delayMilliseconds))
        let notBefore = max(submission.notBeforeMilliseconds, overflow ? Int64.max : delayed)
        var options = submission
        options.body = []
        options.confirmWithinMilliseconds = 0  // the submit's, not the job's: recorded as version 1
        options.keyHold = .kept  // a unique job's hold is in its recorded key's prefix
        // A job that would be prepared as soon as it is on disk has its first start written with
        // it: one write instead of two (see ``JobBook/reserveStart(_:)``).
        let starts =
            mayStart && notBefore <= wall && (paused.isEmpty || !paused.contains(submission.service))
            && book.reserveStart(submission)
        let record = JobRecord(
            id: id.bytes, service: submission.service, body: submission.body, priority: Int(submission.priority),
            notBefore: notBefore > wall ? notBefore : 0, idempotencyKey: submission.idempotencyKey,
            state: starts ? .running : .queued, attempt: starts ? 1 : 0,
            expiresAt: Self.expiry(wall, submission), submittedAt: wall, options: options.encode())
        nextArrival += 1
        let job = JobBook.Job(
            id: id, submission: submission, attempt: starts ? 1 : 0, notBefore: record.notBefore,
            phase: starts ? .preparing : .queued, arrival: nextArrival, trace: trace)
        book.pendingSubmits[id] = JobBook.PendingSubmit(
            job: job, waiter: waiter, keyFor: keyFor, record: keyFor > 0 ? record : nil)
        return (id, record)
    }

    /// The key a per-key rate limit of the job's service takes from its payload's field, for a
    /// job without a key of its own; `nil` if none is taken. A job whose payload gives none is
    /// refused when submitted; one from a schedule or a flow runs under the key "".
    private func payloadKey(_ submission: JobSubmission) -> Result<String, KeyFieldProblem>? {
        guard submission.concurrencyKey == nil, !book.keyRates.isEmpty,
            let scope = book.keyRates.limit(of: submission.service)?.key, scope.field != nil
        else { return nil }
        return scope.key(in: submission.body, service: submission.service)
    }

    /// Answers a status (`hold` nil) or a wait (held up to `hold` nanoseconds while the job
    /// runs) about a job: from memory, or from the journal for one the broker no longer holds.
    /// A job whose outcome is being written is answered once it is on disk.
    mutating func answerAbout(
        _ id: JobID, to caller: JobCaller, holding hold: Int64?, now: Int64, into actions: inout [Action]
    ) {
        guard let job = book.jobs[id] else {
            if flows.runs[id] != nil {
                answerAboutFlow(id, to: caller, holding: hold, now: now, into: &actions)
            } else {
                lookUp(id, for: caller, into: &actions)
            }
            return
        }
        // An outcome being written: heard once on disk. One whose write failed waits for the
        // next try: a status hears the job as it was, a wait waits up to its hold.
        if case .finishing = job.phase, !book.unrecorded.contains(id) {
            waitForOutcome(of: id, caller, into: &actions)
            return
        }
        guard let hold, book.mayHold(caller) else {
            answer(caller, report(job), into: &actions)
            return
        }
        guard book.addWaiter(caller, for: id) else {
            actions.append(.count(.duplicate))
            return
        }
        book.timers.insert(JobBook.TimerEntry(due: now + hold, id: id, kind: .hold(caller)))
    }

    /// Cancels a job the broker holds; `caller` hears once the outcome is on disk. A job being
    /// prepared or prepared is finishing before its service's pipeline is filled again and its
    /// prepared jobs are offered: its place goes to the next, and a credit held for it (it was
    /// the better job being prepared: ``JobBook/betterIsPreparing(_:)``) takes another at once.
    mutating func cancel(_ id: JobID, caller: JobCaller?, into actions: inout [Action]) {
        guard let job = book.jobs[id] else {
            if flows.runs[id] != nil {
                cancelFlow(id, caller: caller, into: &actions)
            } else if let caller {
                lookUp(id, for: caller, into: &actions)
            }
            return
        }
        let service = job.submission.service
        let outcome = RemoteErrorBody(type: ReplyStatus.cancelled.description, message: "cancelled by request")
            .encoded()
        switch job.phase {
        case .finishing:
            guard let caller else { break }
            if case .finishing(let decided) = job.phase, book.unrecorded.contains(id) {
                answer(caller, .journalUnavailable, Self.unrecordedOutcome(id, decided.state), into: &actions)
            } else {
                waitForOutcome(of: id, caller, cancelling: true, into: &actions)
            }
        case .preparing, .prepared:
            if job.phase == .prepared {
                book.ready.unmark(service)
            } else {
                book.preparing.unmark(service)
            }
            book.leavePipeline(service)
            // It never ran: its outcome says so (the report reads the attempt taken back).
            takeBackStart(of: id, into: &actions)
            _ = book.freePlace(of: id)
            let (held, report) = markFinishing(id, .cancelled, status: .cancelled, outcome: outcome)
            prepare(service, into: &actions)
            actions.append(.offer(service: service))
            actions.append(.count(.cancelled))
            // The caller waits first, so that the outcome is written in a commit of its own.
            if let caller { book.addWaiter(caller, for: id, cancelling: true) }
            writeOutcome(held, report, into: &actions)
        case .scheduled, .queued, .running:
            switch job.phase {
            case .queued: book.queued.unmark(service, key: job.submission.concurrencyKey ?? "")
            case .running(let tag, _): actions.append(.cancelAttempt(id, tag: tag))
            default: break  // scheduled: its timer finds it no longer scheduled
            }
            actions.append(.count(.cancelled))
            if let caller { book.addWaiter(caller, for: id, cancelling: true) }
            finish(id, .cancelled, status: .cancelled, outcome: outcome, into: &actions)
        }
    }

    /// Runs a failed or cancelled job again, as a new job with the same task and options.
    private mutating func retry(_ id: JobID, caller: JobCaller, into actions: inout [Action]) {
        if flows.runs[id] != nil {
            answer(caller, .invalidPayload, "flow \(id) has not ended; only an ended job is retried", into: &actions)
            return
        }
        if let job = book.jobs[id] {
            answer(
                caller, .invalidPayload, "job \(id) has not ended (\(report(job).state)); only an ended job is retried",
                into: &actions)
            return
        }
        lookUp(id, for: caller, retry: true, into: &actions)
    }

    /// The journal found the job to retry.
    private mutating func retry(_ id: JobID, _ record: JobRecord?, caller: JobCaller, into actions: inout [Action]) {
        if let record, record.service == FlowSpec.service {
            answer(
                caller, .invalidPayload,
                "\(id) is a flow; a flow is not retried as a job: submit it again (with a new idempotency key)",
                into: &actions)
            return
        }
        guard let record, var submission = resubmission(of: record) else {
            let state = record.map { Self.report($0).state } ?? .unknown
            answer(
                caller, .invalidPayload,
                "job \(id) is \(state); only a failed or cancelled job is retried", into: &actions)
            return
        }
        if book.overLimit {
            answer(caller, .overloaded, "the broker takes no new jobs now", into: &actions)
            return
        }
        // Under the link key a bulk retry takes, so that the two jobs name each other
        // (``JobDetails/retryOf``); a later retry of the same job makes a job of its own, as
        // every retry does, without the link (``submitted(_:_:now:advancingFlow:into:)``).
        submission.idempotencyKey = Self.retryKeyPrefix + id.description
        let (newID, written) = pend(submission, waiter: caller)
        book.pendingSubmits[newID]?.record = written
        book.pendingSubmits[newID]?.unlinkedIfTaken = true
        actions.append(.journal(.write([.submitted(written)], .submitted(newID))))
    }

    private mutating func lookUp(_ id: JobID, for caller: JobCaller, retry: Bool = false, into actions: inout [Action])
    {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        guard startRead(for: caller, into: &actions) else { return }
        actions.append(.journal(.lookup(id, caller, retry: retry)))
    }

    /// Notes that `caller`'s answer waits for a journal read; refuses it (answered `overloaded`)
    /// beyond ``Configuration/inFlightLimit`` reads in flight, so that a flood of lookups cannot
    /// grow the journal's queue without bound.
    mutating func startRead(for caller: JobCaller, into actions: inout [Action]) -> Bool {
        // The same call asked again while its read is in flight gets that read's one answer.
        guard !book.reads.contains(caller) else { return false }
        guard book.reads.count < configuration.inFlightLimit else {
            actions.append(.count(.refusedOverloaded))
            answer(
                caller, .overloaded,
                "\(book.reads.count) job lookups await the journal, the most --queue-limit (\(configuration.inFlightLimit)) allows",
                into: &actions)
            return false
        }
        book.reads.insert(caller)
        return true
    }

    // MARK: Recovery and admission

    /// Takes in jobs the journal held when the broker started (queued, scheduled, or running
    /// when it stopped: these run again, their attempt counting on).
    /// - Returns: how many records could not be read (logged, left in the journal).
    mutating func recover(_ records: [JobRecord], now: Int64, into actions: inout [Action]) -> Int {
        // The schedules come next, through the journal's thread (they fire from its answer).
        actions.append(.journal(.loadSchedules))
        var unreadable = 0
        var flowCount = 0
        for record in records {
            if record.service == FlowSpec.service {
                // A flow: its steps are jobs of their own, taken up below with the rest.
                if recoverFlow(record, into: &actions) {
                    flowCount += 1
                } else {
                    unreadable += 1
                    actions.append(
                        .log(
                            .warning, "journal: a flow's record is unreadable; left as it is",
                            ["flow": Hex.encode(record.id)]))
                }
                continue
            }
            guard let id = JobID(bytes: record.id), var submission = try? JobSubmission(decoding: record.options)
            else {
                unreadable += 1
                actions.append(
                    .log(
                        .warning, "journal: a job's options are unreadable; left as it is",
                        ["job": Hex.encode(record.id)]))
                continue
            }
            submission.body = record.body
            // The column, not the options, says whether the job still holds its key: a unique
            // job's is given up on disk when it is sent or ends.
            submission.idempotencyKey = record.idempotencyKey
            nextArrival += 1
            admit(
                JobBook.Job(
                    id: id, submission: submission, attempt: UInt32(clamping: record.attempt),
                    notBefore: record.notBefore, phase: .queued, arrival: nextArrival),
                now: now, into: &actions)
        }
        if !records.isEmpty {
            actions.append(
                .log(
                    .info, "journal: unfinished jobs taken up again",
                    [
                        "jobs": "\(records.count - unreadable - flowCount)", "flows": "\(flowCount)",
                        "running": "\(records.count { $0.state == .running && $0.service != FlowSpec.service })",
                    ]))
        }
        return unreadable
    }

    /// A recorded job starts its life in memory: scheduled if its time is ahead, else queued.
    mutating func admit(_ job: JobBook.Job, now: Int64, into actions: inout [Action]) {
        var job = job
        let wall = configuration.wallClock()
        if job.notBefore > wall {
            // Saturating: a not-before years ahead is "not in this broker's lifetime", never "now".
            let (wait, waitOverflow) = (job.notBefore - wall).multipliedReportingOverflow(by: 1_000_000)
            let (sum, sumOverflow) = now.addingReportingOverflow(wait)
            let due = waitOverflow || sumOverflow ? Int64.max : sum
            job.phase = .scheduled(due: due)
            book.hold(job)
            book.timers.insert(JobBook.TimerEntry(due: due, id: job.id, kind: .due))
            return
        }
        book.hold(job)
        book.enqueue(job.id)
        prepare(job.submission.service, into: &actions)
    }

    // MARK: Workers' credits and deliveries

    /// A worker serving `services` with `capacity` credits joined: its credits count for their
    /// pipelines, which are filled.
    mutating func workerJoined(serving services: [String], capacity: Int, into actions: inout [Action]) {
        countCredits(of: services, capacity)
        for service in services { prepare(service, into: &actions) }
    }

    /// A worker serving `services` with `capacity` credits left: its credits no longer count
    /// (the broker prepares the services it touched once it has requeued the worker's work).
    mutating func workerLeft(serving services: [String], capacity: Int) {
        countCredits(of: services, -capacity)
    }

    private mutating func countCredits(of services: [String], _ change: Int) {
        for service in services {
            let credits = book.credits[service, default: 0] + change
            book.credits[service] = credits > 0 ? credits : nil
        }
    }

    /// Prepares deliveries of `service`'s best queued jobs while its pipeline has room (see
    /// ``JobBook/pipelineDepth(credits:)``): each start is recorded (the attempt counted) now,
    /// and the job waits for a credit once it is on disk (``started(_:_:into:)``). A full pipeline
    /// gives up its worst start for a queued job of higher priority
    /// (``JobBook/releaseForBetter(_:)``), so that what is prepared is always the best waiting.
    mutating func prepare(_ service: String, into actions: inout [Action]) {
        // A paused service's jobs wait unprepared: no start is written for them; nor any once
        // the broker stops.
        guard !stopping, paused.isEmpty || !paused.contains(service) else { return }
        while true {
            if let id = book.takeToPrepare(service) {
                let attempt = book.update(id, "a job taken to prepare is held") { job in
                    job.attempt += 1
                    return job.attempt
                }
                actions.append(.journal(.write([.started(id: id.bytes, attempt: Int(attempt))], .started(id))))
                continue
            }
            guard let id = book.releaseForBetter(service) else { return }
            takeBackStart(of: id, into: &actions)
        }
    }

    /// A prepared (or preparing) start of `id` will not be sent: its attempt is taken back, in
    /// memory and on disk, so that neither a status nor a broker restarted later counts an
    /// execution that never began. Nobody waits for the write: it joins the next commit (a
    /// start being written for it comes first, the journal keeps the order of writes).
    private mutating func takeBackStart(of id: JobID, into actions: inout [Action]) {
        guard let attempt = book.jobs[id]?.attempt, attempt > 0 else { return }
        book.update(id, "a job whose start is taken back is held") { $0.attempt = attempt - 1 }
        actions.append(
            .journal(.writeWithNextCommit([.released(id: id.bytes, attempt: Int(attempt - 1))], .released(id))))
    }

    /// `service` is paused: nothing of it is prepared, and the starts prepared already are taken
    /// back, on disk too, so that no attempt is counted for a job that did not run (a broker
    /// killed while the service is paused would count them).
    mutating func pause(_ service: String, into actions: inout [Action]) {
        paused.insert(service)
        while let id = book.releaseAny(service) { takeBackStart(of: id, into: &actions) }
    }

    /// The service of the best prepared job among `services` that may go now, if any.
    mutating func best(among services: [String]) -> String? {
        guard !book.ready.isEmpty else { return nil }
        var best: (service: String, arrival: UInt64, priority: Int8)?
        for service in services
        where book.ready.has(service) && (paused.isEmpty || !paused.contains(service))
            && (throttled.isEmpty || !throttled.contains(service))
        {
            // A job of higher priority is being prepared: the credit waits for it (one commit).
            guard !book.betterIsPreparing(service), let head = book.ready.head(service, in: book.jobs)
            else { continue }
            if let current = best,
                !(head.priority > current.priority
                    || (head.priority == current.priority && head.arrival < current.arrival))
            {
                continue
            }
            best = (service, head.arrival, head.priority)
        }
        return best?.service
    }

    /// Takes the best prepared job of `service` (its start is on disk) for a delivery; the
    /// broker hands it to a worker and says so (``dispatched(_:tag:worker:into:)``).
    mutating func take(_ service: String) -> Delivery? {
        guard let id = book.ready.pop(service, in: book.jobs), let job = book.jobs[id] else { return nil }
        book.leavePipeline(service)
        let request = TaskRequest(
            requestID: job.id.requestID, service: service,
            header: RequestHeader(attempt: job.attempt, timeoutMilliseconds: job.submission.timeoutMilliseconds),
            body: job.submission.body, trace: job.trace)
        return Delivery(id: id, order: job.arrival, request: request)
    }

    /// The job ``take(_:)`` gave went out as delivery `tag` to `worker` (its name, for reports):
    /// it runs, and the next of its service is prepared.
    mutating func dispatched(_ id: JobID, tag: UInt64, worker: String, into actions: inout [Action]) {
        let sent = configuration.wallClock()
        let service = book.update(id, "a job taken for a delivery is held") { job in
            job.phase = .running(tag: tag, worker: worker)
            job.startedAt = sent
            // A new attempt starts from nothing; the log lines of the earlier ones stay.
            job.progress?.fraction = nil
            job.progress?.message = nil
            return job.submission.service
        }
        if book.releaseKey(of: id, heldWhileQueued: true) {
            // Nobody waits for it: it joins the next commit. Lost with a broker that dies
            // first, the key holds again, rightly: the job is queued again at the restart.
            actions.append(.journal(.writeWithNextCommit([.keyReleased(id: id.bytes)], .keyReleased(id))))
        }
        prepare(service, into: &actions)
    }

    /// The handler running job `id` reported progress: kept with the job while it runs, and
    /// published as `job.progress` at most once a second; a report within the second is
    /// published when the second is over (``publishLateProgress(into:)``), so that watchers see
    /// the newest. Reports for a job that no longer runs are dropped.
    mutating func progress(_ id: JobID, _ report: ProgressReport, into actions: inout [Action]) {
        let now = configuration.wallClock()
        let publish = book.updateIfHeld(id) { job -> Bool in
            guard case .running = job.phase else { return false }
            var progress = job.progress ?? JobProgress(updatedAt: now)
            progress.apply(report, at: now)
            job.progress = progress
            return now - job.progressPublishedAt >= 1000
        }
        switch publish {
        case true?: publishProgress(of: id, at: now, into: &actions)
        case false?: book.progressUnpublished.insert(id)
        case nil: break
        }
    }

    /// Publishes the reports that came within a second of their job's last event, once it is over.
    private mutating func publishLateProgress(into actions: inout [Action]) {
        guard !book.progressUnpublished.isEmpty else { return }
        let now = configuration.wallClock()
        for id in book.progressUnpublished {
            guard let job = book.jobs[id], case .running = job.phase else {
                book.progressUnpublished.remove(id)
                continue
            }
            if now - job.progressPublishedAt >= 1000 { publishProgress(of: id, at: now, into: &actions) }
        }
    }

    private mutating func publishProgress(of id: JobID, at now: Int64, into actions: inout [Action]) {
        book.progressUnpublished.remove(id)
        guard
            let job = book.updateIfHeld(
                id,
                { job -> JobBook.Job in
                    job.progressPublishedAt = now
                    return job
                })
        else { return }
        actions.append(
            .publish(
                .jobProgress,
                JobEvent(
                    id: job.id, service: job.submission.service, attempt: job.attempt, status: nil,
                    progress: job.progress?.fraction, message: job.progress?.message)))
    }

    /// A job's delivery came back because its worker was lost: queued again at its old place,
    /// or failed once workers were lost ``Configuration/maxLosses`` times running it.
    /// - Returns: what became of it; `nil` if `requestID` names no running job.
    mutating func deliveryLost(_ requestID: RequestID, worker: String, into actions: inout [Action]) -> Loss? {
        guard case let id = JobID(requestID), let job = book.jobs[id], case .running = job.phase else { return nil }
        let losses = book.update(id, "a running job is held") { job in
            job.losses += 1
            return job.losses
        }
        if losses >= configuration.maxLosses {
            actions.append(.count(.failedWorkerLost))
            finish(
                id, .failed, status: .workerLost,
                outcome: RemoteErrorBody(
                    type: ReplyStatus.workerLost.description,
                    message: "the workers running it were lost \(losses) times (the limit); the last was \(worker)"
                ).encoded(), into: &actions)
            return .failed
        }
        book.enqueue(id)
        // Queued again on disk too: a broker that stops before it runs again finds it among the
        // queued, not the running (whose restart counts another attempt); its attempts so far
        // stay counted.
        actions.append(.journal(.write([.rescheduled(id: id.bytes, notBefore: job.notBefore)], .requeued(id))))
        return .requeued
    }

    /// The answer to one attempt of a job (a worker's reply, or one the broker made).
    mutating func attemptEnded(_ reply: TaskReply, now: Int64, into actions: inout [Action]) {
        // Not running: cancelled meanwhile, its outcome is being recorded.
        guard case let id = JobID(reply.requestID), let job = book.jobs[id], case .running = job.phase else {
            return
        }
        // Stopping: the journal keeps it unfinished, and the next start runs it again.
        if reply.status == .brokerShuttingDown { return }
        if reply.status == .ok {
            finish(id, .succeeded, status: .ok, outcome: reply.body, into: &actions)
            return
        }
        let submission = job.submission
        guard submission.retryOn.contains(reply.status), job.attempt < UInt32(submission.maxAttempts) else {
            finish(id, .failed, status: reply.status, outcome: reply.body, into: &actions)
            return
        }
        // Another attempt after the backoff: initial × multiplier^(attempt-1), capped.
        var backoff = Double(submission.initialBackoffMilliseconds)
        for _ in 1..<max(1, Int(job.attempt)) { backoff *= Double(submission.multiplierPercent) / 100 }
        let milliseconds = Int64(min(backoff, Double(submission.maxBackoffMilliseconds)))
        let due = now + milliseconds * 1_000_000
        let notBefore = configuration.wallClock() + milliseconds
        let waiting = book.freePlace(of: id)
        book.update(id, "a running job is held") { job in
            job.phase = .scheduled(due: due)
            job.notBefore = notBefore
        }
        book.timers.insert(JobBook.TimerEntry(due: due, id: id, kind: .due))
        book.retried += 1
        actions.append(.journal(.write([.rescheduled(id: id.bytes, notBefore: notBefore)], .rescheduled(id))))
        publish(.jobRetrying, job, status: reply.status, into: &actions)
        if let waiting { prepare(waiting, into: &actions) }
    }

    // MARK: Outcomes

    /// Records a job's outcome; callers hear once it is on disk (``finished(_:_:into:)``).
    private mutating func finish(
        _ id: JobID, _ state: JobState, status: ReplyStatus, outcome: [UInt8], into actions: inout [Action]
    ) {
        guard book.jobs[id] != nil else { return }
        let waiting = book.freePlace(of: id)
        let (job, report) = markFinishing(id, state, status: status, outcome: outcome)
        writeOutcome(job, report, into: &actions)
        // Its key's next job takes the place it gave up.
        if let waiting { prepare(waiting, into: &actions) }
    }

    /// A held job's outcome is known: it is finishing (no line takes it any more) until the
    /// outcome is on disk.
    private mutating func markFinishing(
        _ id: JobID, _ state: JobState, status: ReplyStatus, outcome: [UInt8]
    ) -> (JobBook.Job, JobReport) {
        book.update(id, "a job being finished is held") { job in
            let report = JobReport(
                state: state, attempt: job.attempt, outcomeStatus: status, service: job.submission.service,
                outcome: outcome)
            job.phase = .finishing(report)
            job.endedAt = configuration.wallClock()
            return (job, report)
        }
    }

    /// Writes a job's outcome: in a commit of its own if a caller waits for it; else with the
    /// journal's next commit (a waiter that comes meanwhile flushes it: ``waitForOutcome``).
    private func writeOutcome(_ job: JobBook.Job, _ report: JobReport, into actions: inout [Action]) {
        let state = Self.journalState(report.state) ?? .failed
        // A flow's step: kept until its flow ends (and as long as it then), and written at once
        // when it succeeded, since the flow's next step waits for it (a stopped flow's cancels,
        // thousands at once, go with the next commits).
        let flowStep = FlowSpec.step(ofKey: job.submission.idempotencyKey ?? "") != nil
        var changes: [JobChange] = []
        // A key held while the job waits or runs goes with its end (first: an ended job's key is
        // kept).
        if JobBook.releasesKeyAtEnd(job.submission.idempotencyKey) {
            changes.append(.keyReleased(id: job.id.bytes))
        }
        changes.append(
            .finished(
                id: job.id.bytes, state: state, outcome: [report.outcomeStatus.rawValue] + report.outcome,
                expiresAt: flowStep ? Int64.max : expiry(of: job.submission, ended: report.state),
                startedAt: job.startedAt, endedAt: job.endedAt > 0 ? job.endedAt : configuration.wallClock(),
                progress: job.progress?.encode()))
        if book.hasWaiters(job.id) || (flowStep && report.state == .succeeded) {
            actions.append(.journal(.write(changes, .finished(job.id))))
        } else {
            actions.append(.journal(.writeWithNextCommit(changes, .finished(job.id))))
        }
    }

    /// `caller` waits until the outcome being written is on disk: the write is not left to wait
    /// for the journal's next commit (the first waiter asks; later ones wait for the same commit).
    private mutating func waitForOutcome(
        of id: JobID, _ caller: JobCaller, cancelling: Bool = false, into actions: inout [Action]
    ) {
        if !book.hasWaiters(id) { actions.append(.journal(.flush)) }
        if !book.addWaiter(caller, for: id, cancelling: cancelling) { actions.append(.count(.duplicate)) }
    }

    // MARK: The journal's answers

    /// The journal did what an ``Action/journal(_:)`` asked.
    mutating func journalAnswered(_ answer: JournalAnswer, now: Int64, into actions: inout [Action]) {
        switch answer {
        case .written(_, .success), .lookedUp(_, _, _, .success), .listed(_, .success), .maintained(.success):
            lastJournalSuccess = now
        default:
            break
        }
        switch answer {
        case .written(_, .failure):
            journalFailures += 1
            journalFailing = true
        case .written(_, .success) where journalFailing:
            journalFailing = false
            actions.append(.log(.info, "journal: writes succeed again", ["failed": "\(journalFailures)"]))
        default:
            break
        }
        switch answer {
        case .lookedUp(_, let caller, _, _), .listed(let caller, _), .flowRead(_, let caller, _),
            .selected(let caller, _), .described(_, let caller, _):
            // Answered already if the broker stopped meanwhile.
            guard book.reads.remove(caller) != nil else { return }
        default:
            break
        }
        switch answer {
        case .written(.submitted(let id), let result):
            submitted(id, result, now: now, into: &actions)
        case .written(.started(let id), let result):
            started(id, result, into: &actions)
        case .written(.finished(let id), let result):
            finished(id, result, into: &actions)
        case .written(.rescheduled(let id), .failure(let error)):
            actions.append(
                .log(
                    .warning, "journal: a job's backoff was not recorded; after a restart it runs without waiting",
                    ["job": "\(id)", "error": "\(error)"]))
        case .written(.requeued(let id), .failure(let error)):
            actions.append(
                .log(
                    .warning,
                    "journal: a lost worker's job was not recorded as queued again; after a restart it counts as running",
                    ["job": "\(id)", "error": "\(error)"]))
        case .written(.released(let id), .failure(let error)):
            actions.append(
                .log(
                    .warning,
                    "journal: a prepared start taken back was not recorded; after a restart it counts as an attempt",
                    ["job": "\(id)", "error": "\(error)"]))
        case .written(.keyReleased(let id), .failure(let error)):
            actions.append(
                .log(
                    .warning,
                    "journal: a unique job sent to a worker kept its key on disk; until it ends, a submit with its key after a restart returns it",
                    ["job": "\(id)", "error": "\(error)"]))
        case .written(.rescheduled, .success), .written(.requeued, .success), .written(.released, .success),
            .written(.keyReleased, .success):
            break
        case .selected(_, let result):
            bulkSelected(result, into: &actions)
        case .described(let id, let caller, let result):
            described(id, caller, result, into: &actions)
        case .read(let result):
            bulkRead(result, into: &actions)
        case .written(.bulkDeleted, let result):
            bulkDeleted(result, into: &actions)
        case .lookedUp(let id, let caller, true, .success(let record)):
            retry(id, record, caller: caller, into: &actions)
        case .lookedUp(let id, let caller, false, .success(let record)):
            // A job held in memory is answered from there: it may have been submitted meanwhile,
            // and the journal shows a prepared start as `running` although it never was.
            if let job = book.jobs[id] {
                self.answer(caller, report(job), into: &actions)
            } else {
                self.answer(caller, record.map(Self.report) ?? JobReport(state: .unknown), into: &actions)
            }
        case .listed(let caller, .success(let found)):
            let listing = JobListing(
                jobs: found.jobs.compactMap { record in
                    JobID(bytes: record.id).map { id in (id, book.jobs[id].map(report) ?? Self.report(record)) }
                }, matched: found.matched)
            actions.append(
                .answer(
                    caller,
                    TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: listing.encode())
                ))
        case .lookedUp(_, let caller, _, .failure(let error)), .listed(let caller, .failure(let error)):
            self.answer(caller, .journalUnavailable, error.description, into: &actions)
        case .maintained(.success(let measured)):
            book.journalBytes = measured.bytes
            book.overLimit = configuration.journalMaxBytes > 0 && measured.bytes >= configuration.journalMaxBytes
            // A full batch: more may have expired; the next tick deletes the next batch, so that
            // expiry keeps up with any steady load (a batch per tick, not per second).
            if measured.deleted >= Self.expiryBatch { nextMaintenance = now }
        case .maintained(.failure(let error)):
            // The counts it carried may not be on disk: the next maintenance saves them again.
            unsavedTotals()
            actions.append(.log(.warning, "journal: maintenance failed", ["error": "\(error)"]))
        case .written(.fired(let name, let jobs, let ticks, let next, let caller), let result):
            scheduleFired(name, jobs: jobs, ticks: ticks, next: next, caller: caller, result, now: now, into: &actions)
        case .written(.scheduleChanged(let change, let caller, let body), let result):
            scheduleChanged(change, caller: caller, answer: body, result, into: &actions)
        case .schedulesLoaded(let result):
            schedulesLoaded(result, into: &actions)
        case .written(.flowSubmitted(let id), let result):
            flowRecorded(id, result, into: &actions)
        case .written(.flowSteps(let ids), let result):
            // One flow's: decided on once, after all of them (a group's hundreds of steps would
            // each decide the whole flow again).
            let flow = ids.first.flatMap { book.pendingSubmits[$0]?.job.submission.idempotencyKey }
                .flatMap { FlowSpec.step(ofKey: $0)?.flow }
            for id in ids { submitted(id, result, now: now, advancingFlow: false, into: &actions) }
            if let flow { advanceFlow(flow, into: &actions) }
        case .written(.flowEnded(let id), let result):
            flowEndWritten(id, result, into: &actions)
        case .written(.servicePaused, _), .written(.serviceLimited, _):
            // The broker's: ``BrokerStateMachine/servicePauseWritten``, ``BrokerStateMachine/serviceLimitWritten``.
            break
        case .flowLoaded(let id, let result):
            flowLoaded(id, result, into: &actions)
        case .flowRead(let id, let caller, let result):
            flowRead(id, caller, result, into: &actions)
        }
    }

    /// A new job is on disk (or not); with `advancingFlow`, the flow whose step it is (if any)
    /// decides at once what comes next.
    mutating func submitted(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, now: Int64, advancingFlow: Bool = true,
        into actions: inout [Action]
    ) {
        if case .success(let receipt) = result, let first = receipt.duplicates[id.bytes],
            let pending = book.pendingSubmits[id], pending.keyFor > 0, let record = pending.record,
            first.submittedAt + Int64(clamping: pending.keyFor) <= configuration.wallClock()
        {
            // Its key is held by a job submitted longer ago than the key holds: the new job
            // takes it, in one transaction (a concurrent submit that took it first is fresh, and
            // answers this one the next time round).
            actions.append(.journal(.write([.keyExpired(id: first.id), .submitted(record)], .submitted(id))))
            return
        }
        if case .success(let receipt) = result, receipt.duplicates[id.bytes] != nil,
            var pending = book.pendingSubmits[id], pending.unlinkedIfTaken, var record = pending.record
        {
            // A retry of a job retried already: its own job, without the link the first holds.
            record.idempotencyKey = nil
            pending.job.submission.idempotencyKey = nil
            pending.unlinkedIfTaken = false
            pending.record = nil
            book.pendingSubmits[id] = pending
            actions.append(.journal(.write([.submitted(record)], .submitted(id))))
            return
        }
        guard let pending = book.pendingSubmits.removeValue(forKey: id) else { return }
        if let kept = pending.kept {
            keptCallSubmitted(id, pending, kept, result, now: now, into: &actions)
            return
        }
        defer {
            flowStepSubmitted(
                id, key: pending.job.submission.idempotencyKey, result, advancing: advancingFlow, into: &actions)
        }
        let service = pending.job.submission.service
        // Its first start was written with it (``JobBook/reserveStart(_:)``).
        let started = pending.job.phase == .preparing
        let written = (try? result.get()).map { $0.duplicates[id.bytes] == nil } ?? false
        if started && !written { book.leavePipeline(service) }
        switch result {
        case .failure(let error):
            if let waiter = pending.waiter { answer(waiter, .journalUnavailable, error.description, into: &actions) }
        case .success(let receipt):
            if let first = receipt.duplicates[id.bytes] {
                // Its idempotency key is taken: the answer names the first job.
                if let waiter = pending.waiter { answer(waiter, id: first.id, into: &actions) }
                return
            }
            book.submitted += 1
            // Answered `journalUnconfirmed` already: the job is recorded all the same, and runs;
            // its submitter learns its id by submitting again with the same idempotency key.
            if let waiter = pending.waiter { answer(waiter, id: id.bytes, into: &actions) }
            var announced = pending.job
            announced.attempt = 0  // none has reached a worker, also when its first start is recorded
            publish(.jobSubmitted, announced, status: nil, into: &actions)
            if started {
                // Its start is on disk with it: it waits for a credit (or is taken back, if its
                // service was paused while it was written).
                book.preparedWithSubmit(pending.job)
                if paused.contains(service) {
                    pause(service, into: &actions)
                } else {
                    actions.append(.offer(service: service))
                }
            } else {
                admit(pending.job, now: now, into: &actions)
            }
        }
    }

    /// The start of a delivery is on disk (or could not be written: it runs anyway, at least
    /// once is kept): the job waits for a credit, unless it was cancelled meanwhile.
    private mutating func started(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]
    ) {
        if case .failure(let error) = result {
            actions.append(
                .log(
                    .warning, "journal: a job's start was not recorded; it runs anyway",
                    ["job": "\(id)", "error": "\(error)"]))
        }
        guard let job = book.jobs[id], job.phase == .preparing else { return }
        book.prepared(id)
        actions.append(.offer(service: job.submission.service))
    }

    private mutating func finished(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]
    ) {
        guard let job = book.jobs[id], case .finishing(let report) = job.phase else { return }
        if case .failure(let error) = result {
            // Not on disk: written again at the next maintenance. Its callers hear the job as
            // it was now (kept waiting, a status or a cancel heard a timeout that blamed the
            // workers, and the outcome later); a wait asks again and waits up to its hold.
            book.unrecorded.insert(id)
            actions.append(
                .log(
                    .warning, "journal: a job's outcome was not recorded; trying again",
                    ["job": "\(id)", "error": "\(error)"]))
            let cancels = book.waiters[id, default: []].filter(book.isCancelling)
            for waiter in book.takeWaiters(of: id) {
                if cancels.contains(waiter) {
                    answer(
                        waiter, .journalUnavailable, "\(Self.unrecordedOutcome(id, report.state)): \(error)",
                        into: &actions)
                } else {
                    answer(waiter, self.report(job), into: &actions)
                }
            }
            return
        }
        book.release(id)
        let kind = book.ended.count(report.state)
        publish(kind, job, status: report.outcomeStatus, into: &actions)
        for waiter in book.takeWaiters(of: id) { answer(waiter, report, into: &actions) }
        flowStepEnded(id, key: job.submission.idempotencyKey, report, into: &actions)
    }

    // MARK: Time

    /// Time passed: scheduled jobs that are due are queued, held waits that reached their
    /// hold are answered "not yet", and every ``Configuration/maintenanceInterval`` the journal
    /// is asked to expire old outcomes and to measure itself (and outcomes whose write failed
    /// are written again).
    mutating func tick(now: Int64, budget: inout WorkBudget, into actions: inout [Action]) {
        publishLateProgress(into: &actions)
        var services: Set<String> = []
        while budget.hasRoom, let first = book.timers.min, first.due <= now {
            book.timers.removeMin()
            switch first.kind {
            case .hold(let waiter):
                guard book.removeWaiter(waiter, of: first.id) else { continue }
                budget.spend()
                if let job = book.jobs[first.id] {
                    answer(waiter, report(job), into: &actions)
                } else if let run = flows.runs[first.id] {
                    answer(waiter, flowReport(run), into: &actions)
                } else if let pending = book.pendingSubmits[first.id] {
                    // A kept call's job not yet on disk (``holdForKeptJob(_:_:now:)``).
                    answer(waiter, report(pending.job), into: &actions)
                } else {
                    lookUp(first.id, for: waiter, into: &actions)
                }
                continue
            case .confirm(let waiter):
                // Spent also on a submit answered meanwhile (most are): a burst of them comes
                // due together, and is popped over several slices.
                budget.spend()
                guard let pending = book.pendingSubmits[first.id], pending.waiter == waiter else { continue }
                let bound = Int64(pending.job.submission.confirmWithinMilliseconds) * 1_000_000
                let (quietUntil, overflow) = lastJournalSuccess.addingReportingOverflow(bound)
                if !overflow, quietUntil > now {
                    // The journal recorded something within the bound: it is working through
                    // what came before this submit, which waits its turn.
                    book.timers.insert(JobBook.TimerEntry(due: quietUntil, id: first.id, kind: .confirm(waiter)))
                    continue
                }
                book.pendingSubmits[first.id]?.waiter = nil
                answer(
                    waiter, .journalUnconfirmed,
                    "the job store recorded nothing for \(pending.job.submission.confirmWithinMilliseconds) ms (the submit's confirm-within), this job included; it may still be recorded, and then runs. Submit it again with the same idempotency key to get its id if it was",
                    into: &actions)
                continue
            case .due:
                break
            }
            guard let job = book.jobs[first.id], job.phase == .scheduled(due: first.due) else { continue }
            budget.spend()
            book.enqueue(first.id)
            services.insert(job.submission.service)
        }
        for service in services { prepare(service, into: &actions) }
        guard configuration.journal else { return }
        fireSchedules(budget: &budget, into: &actions)
        advanceLaterFlows(budget: &budget, into: &actions)
        if now >= nextMaintenance ?? now {
            let (next, overflow) = now.addingReportingOverflow(configuration.maintenanceInterval)
            nextMaintenance = overflow ? Int64.max : next
            actions.append(
                .journal(
                    .maintain(
                        nowMilliseconds: configuration.wallClock(), limit: Self.expiryBatch, totals: totalsToSave())))
            let unrecorded = book.unrecorded
            book.unrecorded.removeAll()
            for id in unrecorded {
                guard let job = book.jobs[id], case .finishing(let report) = job.phase else { continue }
                writeOutcome(job, report, into: &actions)
            }
            retryFlows(into: &actions)
        }
    }

    // MARK: Shutdown

    /// What a caller hears of a job whose outcome is decided but not on disk.
    static func unrecordedOutcome(_ id: JobID, _ state: JobState) -> String {
        "job \(id) has ended \(state), but the journal could not record it; the broker writes it again every maintenance interval and nothing runs the job meanwhile, but a broker stopped before then runs it again (cancel it again then). Ask again once the journal works (a full disk: free space)"
    }

    /// The broker is stopping: every caller it still owes an answer hears so, once (a lookup
    /// or listing whose journal read is in flight too: its late answer is dropped), and later
    /// job requests are answered so. A submit whose write is in flight may still be recorded;
    /// the client's retry carries the same idempotency key, so the restarted broker answers it
    /// with that job. A held wait, or a status or cancel waiting for an outcome being written,
    /// asks the restarted broker again (`brokerShuttingDown` is retried as an unreachable
    /// broker) instead of waiting out its attempt's timeout.
    mutating func shutdown(_ message: String, into actions: inout [Action]) {
        stopping = true
        if !book.unrecorded.isEmpty {
            actions.append(
                .log(
                    .warning,
                    "stopping with outcomes the journal did not record: those jobs run again when the broker starts",
                    ["jobs": "\(book.unrecorded.count)"]))
        }
        // The starts prepared ahead never reach a worker now: taken back, on disk too (the
        // journal commits what is queued before it closes), so that the broker that starts next
        // counts only attempts that ran, as after a pause. A crash still counts them.
        for service in Array(book.pipeline.keys) {
            while let id = book.releaseAny(service) { takeBackStart(of: id, into: &actions) }
        }
        for case let waiter? in book.pendingSubmits.values.map(\.waiter) {
            answer(waiter, .brokerShuttingDown, message, into: &actions)
        }
        book.pendingSubmits.removeAll()
        for id in Array(flows.pending.keys) {
            if let pending = flows.unpend(id) { answer(pending.caller, .brokerShuttingDown, message, into: &actions) }
        }
        for caller in book.reads {
            answer(caller, .brokerShuttingDown, message, into: &actions)
        }
        book.reads.removeAll()
        // A bulk action past its selection: what it did stands, the caller hears it was cut short.
        if let run = bulk.take() {
            answer(
                run.caller, .brokerShuttingDown, "\(message); the bulk \(run.kind) acted on \(run.outcome.acted) jobs",
                into: &actions)
        }
        for caller in schedules.takeCallers() {
            answer(caller, .brokerShuttingDown, message, into: &actions)
        }
        for id in Array(book.waiters.keys) {
            for waiter in book.takeWaiters(of: id) {
                answer(waiter, .brokerShuttingDown, message, into: &actions)
            }
        }
    }

    // MARK: Answers

    /// Whether the broker takes a schedule's or a flow's request now: not without a journal,
    /// nor while it stops (`caller` hears why).
    func takesRequests(answering caller: JobCaller, into actions: inout [Action]) -> Bool {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return false
        }
        if stopping {
            answer(caller, .brokerShuttingDown, "the broker is shutting down", into: &actions)
            return false
        }
        return true
    }

    func answer(_ caller: JobCaller, _ report: JobReport, into actions: inout [Action]) {
        actions.append(
            .answer(
                caller,
                TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: report.encode())))
    }

    /// A submit's answer: the job's id.
    func answer(_ caller: JobCaller, id: [UInt8], into actions: inout [Action]) {
        actions.append(
            .answer(
                caller, TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: id)))
    }

    func answer(_ caller: JobCaller, _ status: ReplyStatus, _ message: String, into actions: inout [Action]) {
        actions.append(.answer(caller, .failure(caller.requestID, status, message: message, attempt: caller.attempt)))
    }

    func publish(
        _ kind: EventKind, _ job: JobBook.Job, status: ReplyStatus?, schedule: ScheduleTick? = nil,
        into actions: inout [Action]
    ) {
        actions.append(
            .publish(
                kind,
                JobEvent(
                    id: job.id, service: job.submission.service, attempt: job.attempt, status: status,
                    schedule: schedule)))
    }
}
