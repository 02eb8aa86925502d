import HeapModule
import SkyJournal
import SkyProtocol

/// Durable jobs: `mmi.jobs.*` requests, the journal's answers, and jobs running like requests.
///
/// A job is recorded before anything else happens to it: the submit is answered, and the job
/// queued, once the journal has it on disk. Each delivery is recorded before it is sent (so a
/// job's `attempt` counts every execution, also across broker restarts), and the outcome is
/// recorded once; callers waiting for it hear when it is on disk. Deliveries are recorded ahead
/// of the credits that will take them (up to ``JobBook/pipelineDepth(credits:)`` per service),
/// so a credit never waits for a commit: a broker killed meanwhile counts those prepared deliveries as
/// attempts although they never reached a worker. At a worker a job is a request
/// like any other (same handler, same credits), under the reserved client number ``jobsClient``,
/// which no peer can map to. Jobs wait in their own per-service queues, higher priority first;
/// a freed credit goes to a waiting request if there is one (a caller waits on a deadline), else
/// to the best waiting job, so a job backlog never delays `scan` traffic. Jobs are
/// bounded by the journal (`--journal-max-bytes`), not by the request queue's limits, and are
/// not subject to `--max-wait` or the no-workers grace: a job waits until a worker serves it.
extension BrokerStateMachine {
    /// The client number jobs run under at workers.
    static let jobsClient: ClientNumber = ClientBook.jobs

    /// Whether `task` is a delivery of a job.
    static func isJob(_ task: QueuedRequest) -> Bool { task.client == jobsClient }

    /// Jobs the broker holds (unfinished), for snapshots and tests.
    package var jobCount: Int { jobBook.jobs.count }

    /// The jobs' counts for stats and snapshots; `nil` without a journal.
    var jobCounts: JobCounts? {
        guard configuration.journal else { return nil }
        return JobCounts(
            held: jobBook.jobs.count, queued: jobBook.queued.total + jobBook.pipeline.values.reduce(0, +),
            submitted: jobBook.submitted,
            succeeded: jobBook.succeeded, failed: jobBook.failed, cancelled: jobBook.cancelled,
            retried: jobBook.retried, journalBytes: jobBook.journalBytes, waiters: jobBook.waiterCount)
    }

    /// Answers an `mmi.jobs.*` request; `false` if `request` names no job service.
    mutating func answerJobService(
        _ request: TaskRequest, for peer: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) -> Bool {
        let caller = JobCaller(peer: peer, requestID: request.requestID, attempt: request.header.attempt)
        if stopping, BrokerService.jobServices.contains(request.service) {
            // Nothing held now would be answered: the caller asks the broker that comes back.
            answer(caller, .brokerShuttingDown, "the broker is shutting down", into: &actions)
            return true
        }
        switch request.service {
        case BrokerService.jobSubmit:
            submitJob(request.body, trace: request.trace, caller: caller, now: now, into: &actions)
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
                answerAbout(id, to: caller, holding: configuration.jobWaitHold, now: now, into: &actions)
            case BrokerService.jobCancel: cancelJob(id, caller: caller, now: now, into: &actions)
            default: retryJob(id, caller: caller, into: &actions)
            }
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

    /// Expired jobs deleted per maintenance: small transactions, so that expiry never holds up
    /// the journal's other writes for long.
    static let expiryBatch = 1000

    static let noJournal =
        "this broker keeps no journal, so it takes no jobs: start skybroker with --state-dir (scan works without one)"

    // MARK: Submit

    private mutating func submitJob(
        _ body: [UInt8], trace: [UInt8]?, caller: JobCaller, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        if jobBook.overLimit {
            counters.rejectedOverloaded += 1
            answer(
                caller, .overloaded,
                "the journal holds \(jobBook.journalBytes) bytes, over its limit of \(configuration.journalMaxBytes) (--journal-max-bytes): new jobs are refused until results expire",
                into: &actions)
            return
        }
        if jobBook.pendingSubmits.count >= configuration.queueLimit {
            counters.rejectedOverloaded += 1
            answer(
                caller, .overloaded,
                "\(jobBook.pendingSubmits.count) submits await the journal, the most --queue-limit (\(configuration.queueLimit)) allows",
                into: &actions)
            return
        }
        if jobBook.jobs.count >= configuration.maxHeldJobs || jobBook.heldBytes >= configuration.maxHeldJobBytes {
            counters.rejectedOverloaded += 1
            answer(
                caller, .overloaded,
                "the broker holds \(jobBook.jobs.count) unfinished jobs (\(jobBook.heldBytes) bytes of tasks), its limit (\(configuration.maxHeldJobs) jobs, \(configuration.maxHeldJobBytes) bytes): new jobs are refused until workers catch up",
                into: &actions)
            return
        }
        let submission: JobSubmission
        do {
            submission = try JobSubmission(decoding: body)
        } catch {
            answer(caller, .invalidPayload, "mmi.jobs.submit: \(error)", into: &actions)
            return
        }
        if submission.service.hasPrefix(BrokerService.prefix) {
            answer(caller, .unknownService, "a job cannot run the broker's own \(submission.service)", into: &actions)
            return
        }
        record(submission, trace: trace, answering: caller, into: &actions)
    }

    /// Writes a new job; its submitter is answered once it is on disk (``submittedJob``).
    private mutating func record(
        _ submission: JobSubmission, trace: [UInt8]? = nil, answering caller: JobCaller,
        into actions: inout [BrokerAction]
    ) {
        let wall = configuration.wallClock()
        let id = JobID(milliseconds: wall, random: &jobIDGenerator)
        let (delayed, overflow) = wall.addingReportingOverflow(Int64(clamping: submission.delayMilliseconds))
        let notBefore = max(submission.notBeforeMilliseconds, overflow ? Int64.max : delayed)
        var options = submission
        options.body = []
        // A job that would be prepared as soon as it is on disk has its first start written with
        // it: one write instead of two (see ``JobBook/reserveStart(_:)``).
        let starts = notBefore <= wall && jobBook.reserveStart(submission.service)
        let record = JobRecord(
            id: id.bytes, service: submission.service, body: submission.body, priority: Int(submission.priority),
            notBefore: notBefore > wall ? notBefore : 0, idempotencyKey: submission.idempotencyKey,
            state: starts ? .running : .queued, attempt: starts ? 1 : 0,
            expiresAt: Self.expiry(wall, submission), submittedAt: wall, options: options.encode())
        nextArrival += 1
        let job = JobBook.Job(
            id: id, submission: submission, attempt: starts ? 1 : 0, notBefore: record.notBefore,
            phase: starts ? .preparing : .queued, arrival: nextArrival << Self.slotBits, trace: trace)
        jobBook.pendingSubmits[id] = JobBook.PendingSubmit(job: job, waiter: caller)
        actions.append(.journal(.write([.submitted(record)], .submitted(id))))
    }

    /// When a job's record may go: its retention after `wall`.
    static func expiry(_ wall: Int64, _ submission: JobSubmission) -> Int64 {
        let (sum, overflow) = wall.addingReportingOverflow(Int64(clamping: submission.retentionMilliseconds))
        return overflow ? Int64.max : sum
    }

    /// Takes in jobs the journal held when the broker started (queued, scheduled, or running
    /// when it stopped: these run again, their attempt counting on).
    /// - Returns: how many records could not be read (logged, left in the journal).
    @discardableResult
    package mutating func recover(_ records: [JobRecord], now: Instant, into actions: inout [BrokerAction]) -> Int {
        var unreadable = 0
        for record in records {
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
            nextArrival += 1
            admit(
                JobBook.Job(
                    id: id, submission: submission, attempt: UInt32(clamping: record.attempt),
                    notBefore: record.notBefore, phase: .queued, arrival: nextArrival << Self.slotBits),
                now: now, into: &actions)
        }
        if !records.isEmpty {
            actions.append(
                .log(
                    .info, "journal: unfinished jobs taken up again",
                    ["jobs": "\(records.count - unreadable)", "running": "\(records.count { $0.state == .running })"]))
        }
        return unreadable
    }

    /// A recorded job starts its life in memory: scheduled if its time is ahead, else queued.
    private mutating func admit(_ job: JobBook.Job, now: Instant, into actions: inout [BrokerAction]) {
        var job = job
        let wall = configuration.wallClock()
        if job.notBefore > wall {
            // Saturating: a not-before years ahead is "not in this broker's lifetime", never "now".
            let (wait, waitOverflow) = (job.notBefore - wall).multipliedReportingOverflow(by: 1_000_000)
            let (sum, sumOverflow) = ticks(now).addingReportingOverflow(wait)
            let due = waitOverflow || sumOverflow ? Int64.max : sum
            job.phase = .scheduled(due: due)
            jobBook.hold(job)
            jobBook.timers.insert(JobBook.TimerEntry(due: due, id: job.id, waiter: nil))
            return
        }
        jobBook.hold(job)
        jobBook.enqueue(job.id)
        prepareJobs(of: job.submission.service, into: &actions)
    }

    /// Gives prepared jobs of `service` to its workers with free credits.
    private mutating func offerJobs(of service: String, now: Instant, into actions: inout [BrokerAction]) {
        for peer in workers(serving: service) {
            guard jobBook.ready.has(service) else { return }
            if (workers[peer]?.freeCredits ?? 0) > 0 { fill(peer, now: now, into: &actions) }
        }
    }

    /// Prepares deliveries of `service`'s best queued jobs while its pipeline has room (see
    /// ``JobBook/pipelineDepth(credits:)``): each start is recorded (the attempt counted) now,
    /// and the job waits for a credit once it is on disk (``startedJob``). A full pipeline
    /// gives up its worst start for a queued job of higher priority
    /// (``JobBook/releaseForBetter(_:)``), so that what is prepared is always the best waiting.
    mutating func prepareJobs(of service: String, into actions: inout [BrokerAction]) {
        while true {
            if let id = jobBook.takeToPrepare(service) {
                jobBook.jobs[id]!.attempt += 1
                let attempt = jobBook.jobs[id]!.attempt
                actions.append(.journal(.write([.started(id: id.bytes, attempt: Int(attempt))], .started(id))))
                continue
            }
            guard let id = jobBook.releaseForBetter(service) else { return }
            takeBackStart(of: id, into: &actions)
        }
    }

    /// A prepared (or preparing) start of `id` will not be sent: its attempt is taken back, in
    /// memory and on disk, so that neither a status nor a broker restarted later counts an
    /// execution that never began. Nobody waits for the write: it joins the next commit (a
    /// start being written for it comes first, the journal keeps the order of writes).
    private mutating func takeBackStart(of id: JobID, into actions: inout [BrokerAction]) {
        guard let attempt = jobBook.jobs[id]?.attempt, attempt > 0 else { return }
        jobBook.jobs[id]!.attempt = attempt - 1
        actions.append(
            .journal(.writeWithNextCommit([.released(id: id.bytes, attempt: Int(attempt - 1))], .released(id))))
    }

    /// A worker's credits now count for (`joined`) or no longer count for its services' job
    /// pipelines.
    mutating func countJobCredits(of record: WorkerRecord, joined: Bool) {
        for service in record.services {
            let credits = jobBook.credits[service, default: 0] + (joined ? record.capacity : -record.capacity)
            jobBook.credits[service] = credits > 0 ? credits : nil
        }
    }

    // MARK: Running

    /// The best prepared job of the services a worker serves: (service, arrival, priority), if any.
    mutating func bestWaitingJob(among services: [String]) -> (service: String, arrival: UInt64, priority: Int8)? {
        guard !jobBook.ready.isEmpty else { return nil }
        var best: (service: String, arrival: UInt64, priority: Int8)?
        for service in services where jobBook.ready.has(service) {
            // A job of higher priority is being prepared: the credit waits for it (one commit).
            guard !jobBook.betterIsPreparing(service), let head = jobBook.ready.head(service, in: jobBook.jobs)
            else { continue }
            if let current = best,
                !(head.priority > current.priority
                    || (head.priority == current.priority && head.arrival < current.arrival))
            {
                continue
            }
            best = (service, head.arrival, head.priority)
        }
        return best
    }

    /// Sends the best prepared job of `service` to `peer` (its start is on disk), and prepares
    /// the next.
    mutating func dispatchJob(of service: String, to peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        guard let id = jobBook.ready.pop(service, in: jobBook.jobs), var job = jobBook.jobs[id] else { return }
        jobBook.leavePipeline(service)
        clients.addJobDelivery()
        let request = TaskRequest(
            requestID: job.id.requestID, service: service,
            header: RequestHeader(attempt: job.attempt, timeoutMilliseconds: job.submission.timeoutMilliseconds),
            body: job.submission.body, trace: job.trace)
        // Its service is known: the worker it goes to serves it.
        let number = services.number(of: service) ?? ServiceBook.none
        let task = QueuedRequest(
            client: Self.jobsClient, request: request, arrival: job.arrival & ~Self.slotMask | UInt64(number),
            arrivedAt: ticks(now))
        let (tag, packed) = hand(task, to: peer)
        job.phase = .running(peer, tag: tag)
        jobBook.jobs[job.id] = job
        // A job's wait is in the job book, not here.
        send(request, waited: 0, tag: tag, packed: packed, delivery: 1, to: peer, into: &actions)
        prepareJobs(of: service, into: &actions)
    }

    /// The start of a delivery is on disk (or could not be written: it runs anyway, at least
    /// once is kept): the job waits for a credit, unless it was cancelled meanwhile.
    private mutating func startedJob(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, now: Instant, into actions: inout [BrokerAction]
    ) {
        if case .failure(let error) = result {
            actions.append(
                .log(
                    .warning, "journal: a job's start was not recorded; it runs anyway",
                    ["job": "\(id)", "error": "\(error)"]))
        }
        guard let job = jobBook.jobs[id], job.phase == .preparing else { return }
        jobBook.prepared(id)
        offerJobs(of: job.submission.service, now: now, into: &actions)
    }

    /// A job's delivery went back because its worker was lost: queued again at its old place,
    /// or failed once workers were lost ``Configuration/maxDeliveries`` times running it.
    /// - Returns: whether it was queued again (the caller counts it with the requests it requeued).
    mutating func jobDeliveryLost(_ task: QueuedRequest, worker: String, into actions: inout [BrokerAction]) -> Bool {
        guard case let id = JobID(task.request.requestID), var job = jobBook.jobs[id], case .running = job.phase
        else { return false }
        finishRequest(Self.jobsClient)
        job.losses += 1
        jobBook.jobs[id] = job
        if job.losses >= configuration.maxDeliveries {
            counters.failedWorkerLost += 1
            finishJob(
                id, .failed, status: .workerLost,
                outcome: RemoteErrorBody(
                    type: ReplyStatus.workerLost.description,
                    message: "the workers running it were lost \(job.losses) times (the limit); the last was \(worker)"
                ).encoded(), into: &actions)
            return false
        }
        jobBook.enqueue(id)
        // Queued again on disk too: a broker that stops before it runs again finds it among the
        // queued, not the running (whose restart counts another attempt); its attempts so far
        // stay counted.
        actions.append(.journal(.write([.rescheduled(id: id.bytes, notBefore: job.notBefore)], .requeued(id))))
        return true
    }

    /// The answer to one attempt of a job (a worker's reply, or one the broker made).
    mutating func jobAttemptEnded(_ reply: TaskReply, into actions: inout [BrokerAction]) {
        // Not running: cancelled meanwhile, its outcome is being recorded.
        guard case let id = JobID(reply.requestID), let job = jobBook.jobs[id], case .running = job.phase else {
            return
        }
        // Stopping: the journal keeps it unfinished, and the next start runs it again.
        if reply.status == .brokerShuttingDown { return }
        if reply.status == .ok {
            finishJob(id, .succeeded, status: .ok, outcome: reply.body, into: &actions)
            return
        }
        let submission = job.submission
        guard submission.retryOn.contains(reply.status), job.attempt < UInt32(submission.maxAttempts) else {
            finishJob(id, .failed, status: reply.status, outcome: reply.body, into: &actions)
            return
        }
        // Another attempt after the backoff: initial × multiplier^(attempt-1), capped.
        var backoff = Double(submission.initialBackoffMilliseconds)
        for _ in 1..<max(1, Int(job.attempt)) { backoff *= Double(submission.multiplierPercent) / 100 }
        let milliseconds = Int64(min(backoff, Double(submission.maxBackoffMilliseconds)))
        let now = lastNow ?? epoch ?? .now
        let due = ticks(now) + milliseconds * 1_000_000
        jobBook.jobs[id]?.phase = .scheduled(due: due)
        let notBefore = configuration.wallClock() + milliseconds
        jobBook.jobs[id]?.notBefore = notBefore
        jobBook.timers.insert(JobBook.TimerEntry(due: due, id: id, waiter: nil))
        jobBook.retried += 1
        actions.append(.journal(.write([.rescheduled(id: id.bytes, notBefore: notBefore)], .rescheduled(id))))
        publishJob(.jobRetrying, job, status: reply.status, into: &actions)
    }

    /// Records a job's outcome; callers hear once it is on disk (``finishedJob``).
    private mutating func finishJob(
        _ id: JobID, _ state: JobState, status: ReplyStatus, outcome: [UInt8], into actions: inout [BrokerAction]
    ) {
        guard var job = jobBook.jobs[id] else { return }
        let report = JobReport(
            state: state, attempt: job.attempt, outcomeStatus: status, service: job.submission.service,
            outcome: outcome)
        job.phase = .finishing(report)
        jobBook.jobs[id] = job
        writeOutcome(job, report, into: &actions)
    }

    /// Writes a job's outcome: in a commit of its own if a caller waits for it; else with the
    /// journal's next commit (a waiter that comes meanwhile flushes it: ``waitForOutcome``).
    private mutating func writeOutcome(_ job: JobBook.Job, _ report: JobReport, into actions: inout [BrokerAction]) {
        let state = Self.journalState(report.state) ?? .failed
        let changes: [JobChange] = [
            .finished(
                id: job.id.bytes, state: state, outcome: [report.outcomeStatus.rawValue] + report.outcome,
                expiresAt: Self.expiry(configuration.wallClock(), job.submission))
        ]
        if jobBook.hasWaiters(job.id) {
            actions.append(.journal(.write(changes, .finished(job.id))))
        } else {
            actions.append(.journal(.writeWithNextCommit(changes, .finished(job.id))))
        }
    }

    /// `caller` waits until the outcome being written is on disk: the write is not left to wait
    /// for the journal's next commit (the first waiter asks; later ones wait for the same commit).
    private mutating func waitForOutcome(of id: JobID, _ caller: JobCaller, into actions: inout [BrokerAction]) {
        if !jobBook.hasWaiters(id) { actions.append(.journal(.flush)) }
        jobBook.addWaiter(caller, for: id)
    }

    private mutating func finishedJob(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, into actions: inout [BrokerAction]
    ) {
        guard let job = jobBook.jobs[id], case .finishing(let report) = job.phase else { return }
        if case .failure(let error) = result {
            // Not on disk: written again at the next maintenance; its callers wait till then.
            jobBook.unrecorded.append(id)
            actions.append(
                .log(
                    .warning, "journal: a job's outcome was not recorded; trying again",
                    ["job": "\(id)", "error": "\(error)"]))
            return
        }
        jobBook.release(id)
        let kind: EventKind
        switch report.state {
        case .succeeded:
            jobBook.succeeded += 1
            kind = .jobSucceeded
        case .cancelled:
            jobBook.cancelled += 1
            kind = .jobCancelled
        default:
            jobBook.failed += 1
            kind = .jobFailed
        }
        publishJob(kind, job, status: report.outcomeStatus, into: &actions)
        for waiter in jobBook.takeWaiters(of: id) { answer(waiter, report, into: &actions) }
    }

    // MARK: Status, wait, cancel

    /// Where a job the broker holds stands.
    func report(_ job: JobBook.Job) -> JobReport {
        let service = job.submission.service
        switch job.phase {
        case .scheduled:
            return JobReport(
                state: .scheduled, attempt: job.attempt, notBeforeMilliseconds: job.notBefore, service: service)
        case .queued:
            return JobReport(state: .queued, attempt: job.attempt, service: service)
        case .preparing, .prepared:
            // Its delivery is recorded but has not reached a worker.
            return JobReport(state: .queued, attempt: job.attempt - 1, service: service)
        case .running(let peer, _):
            return JobReport(state: .running, attempt: job.attempt, worker: workers[peer]?.name ?? "", service: service)
        case .finishing(let report):
            return report
        }
    }

    /// Answers a status (`hold` nil) or a wait (held up to `hold` while the job runs) about a
    /// job: from memory, or from the journal for one the broker no longer holds. A job whose
    /// outcome is being written is answered once it is on disk.
    private mutating func answerAbout(
        _ id: JobID, to caller: JobCaller, holding hold: Duration?, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard let job = jobBook.jobs[id] else {
            lookUp(id, for: caller, into: &actions)
            return
        }
        if case .finishing = job.phase {
            waitForOutcome(of: id, caller, into: &actions)
            return
        }
        guard let hold, jobBook.waiterCount < JobBook.maxWaiters else {
            answer(caller, report(job), into: &actions)
            return
        }
        jobBook.addWaiter(caller, for: id)
        jobBook.timers.insert(
            JobBook.TimerEntry(due: ticks(now) + Self.nanoseconds(hold), id: id, waiter: caller))
    }

    private mutating func cancelJob(
        _ id: JobID, caller: JobCaller, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard let job = jobBook.jobs[id] else {
            lookUp(id, for: caller, into: &actions)
            return
        }
        switch job.phase {
        case .finishing:
            break
        case .scheduled:
            break  // its timer finds it no longer scheduled
        case .queued:
            jobBook.queued.unmark(job.submission.service)
        case .preparing, .prepared:
            if job.phase == .prepared {
                jobBook.ready.unmark(job.submission.service)
            } else {
                jobBook.preparing.unmark(job.submission.service)
            }
            jobBook.leavePipeline(job.submission.service)
            // It never ran: its outcome says so (the report below reads the attempt).
            takeBackStart(of: id, into: &actions)
            prepareJobs(of: job.submission.service, into: &actions)
            // A credit held for it (``JobBook/betterIsPreparing(_:)``) takes another job.
            offerJobs(of: job.submission.service, now: now, into: &actions)
        case .running(_, let tag):
            let key = TaskKey(client: Self.jobsClient, requestID: id.requestID)
            tasks[key] = nil
            cancelAtWorker(key, tag: tag, into: &actions)
        }
        if case .finishing = job.phase {
            waitForOutcome(of: id, caller, into: &actions)
            return
        }
        counters.cancelled += 1
        // The caller waits first, so that the outcome is written in a commit of its own.
        jobBook.addWaiter(caller, for: id)
        finishJob(
            id, .cancelled, status: .cancelled,
            outcome: RemoteErrorBody(type: ReplyStatus.cancelled.description, message: "cancelled by request")
                .encoded(),
            into: &actions)
    }

    private mutating func lookUp(
        _ id: JobID, for caller: JobCaller, retry: Bool = false, into actions: inout [BrokerAction]
    ) {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        guard startRead(for: caller, into: &actions) else { return }
        actions.append(.journal(.lookup(id, caller, retry: retry)))
    }

    /// Notes that `caller`'s answer waits for a journal read; refuses it (answered `overloaded`)
    /// beyond ``Configuration/queueLimit`` reads in flight, so that a flood of lookups cannot
    /// grow the journal's queue without bound.
    private mutating func startRead(for caller: JobCaller, into actions: inout [BrokerAction]) -> Bool {
        // The same call asked again while its read is in flight gets that read's one answer.
        guard !jobBook.reads.contains(caller) else { return false }
        guard jobBook.reads.count < configuration.queueLimit else {
            counters.rejectedOverloaded += 1
            answer(
                caller, .overloaded,
                "\(jobBook.reads.count) job lookups await the journal, the most --queue-limit (\(configuration.queueLimit)) allows",
                into: &actions)
            return false
        }
        jobBook.reads.insert(caller)
        return true
    }

    /// Runs a failed or cancelled job again, as a new job with the same task and options.
    private mutating func retryJob(_ id: JobID, caller: JobCaller, into actions: inout [BrokerAction]) {
        if let job = jobBook.jobs[id] {
            answer(
                caller, .invalidPayload, "job \(id) has not ended (\(report(job).state)); only an ended job is retried",
                into: &actions)
            return
        }
        lookUp(id, for: caller, retry: true, into: &actions)
    }

    /// The journal found the job to retry.
    private mutating func retry(
        _ id: JobID, _ record: JobRecord?, caller: JobCaller, into actions: inout [BrokerAction]
    ) {
        guard let record, record.state == .failed || record.state == .cancelled,
            var submission = try? JobSubmission(decoding: record.options)
        else {
            let state = record.map { Self.report($0).state } ?? .unknown
            answer(
                caller, .invalidPayload,
                "job \(id) is \(state); only a failed or cancelled job is retried", into: &actions)
            return
        }
        if jobBook.overLimit {
            answer(caller, .overloaded, "the broker takes no new jobs now", into: &actions)
            return
        }
        submission.body = record.body
        submission.idempotencyKey = nil
        submission.delayMilliseconds = 0
        submission.notBeforeMilliseconds = 0
        self.record(submission, answering: caller, into: &actions)
    }

    /// A job as the journal has it, as a report.
    static func report(_ record: JobRecord) -> JobReport {
        let state: JobState =
            switch record.state {
            case .queued: record.notBefore > 0 ? .scheduled : .queued
            case .running: .running
            case .succeeded: .succeeded
            case .failed: .failed
            case .cancelled: .cancelled
            }
        let outcome = record.outcome ?? []
        return JobReport(
            state: state, attempt: UInt32(clamping: record.attempt), notBeforeMilliseconds: record.notBefore,
            outcomeStatus: outcome.first.flatMap(ReplyStatus.init(rawValue:)) ?? .ok, service: record.service,
            outcome: Array(outcome.dropFirst()))
    }

    static func journalState(_ state: JobState) -> JobRecord.State? {
        switch state {
        case .queued, .scheduled: .queued
        case .running: .running
        case .succeeded: .succeeded
        case .failed: .failed
        case .cancelled: .cancelled
        case .unknown: nil
        }
    }

    // MARK: The journal's answers and time

    /// The journal did what ``BrokerAction/journal(_:)`` asked.
    package mutating func journalAnswered(_ answer: JournalAnswer, now: Instant, into actions: inout [BrokerAction]) {
        lastNow = now
        switch answer {
        case .lookedUp(_, let caller, _, _), .listed(let caller, _):
            // Answered already if the broker stopped meanwhile.
            guard jobBook.reads.remove(caller) != nil else { return }
        default:
            break
        }
        switch answer {
        case .written(.submitted(let id), let result):
            submittedJob(id, result, now: now, into: &actions)
        case .written(.started(let id), let result):
            startedJob(id, result, now: now, into: &actions)
        case .written(.finished(let id), let result):
            finishedJob(id, result, into: &actions)
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
        case .written(.rescheduled, .success), .written(.requeued, .success), .written(.released, .success):
            break
        case .lookedUp(let id, let caller, true, .success(let record)):
            retry(id, record, caller: caller, into: &actions)
        case .lookedUp(let id, let caller, false, .success(let record)):
            // A job held in memory is answered from there: it may have been submitted meanwhile,
            // and the journal shows a prepared start as `running` although it never was.
            if let job = jobBook.jobs[id] {
                self.answer(caller, report(job), into: &actions)
            } else {
                self.answer(caller, record.map(Self.report) ?? JobReport(state: .unknown), into: &actions)
            }
        case .listed(let caller, .success(let records)):
            let listing = JobListing(
                jobs: records.compactMap { record in
                    JobID(bytes: record.id).map { id in (id, jobBook.jobs[id].map(report) ?? Self.report(record)) }
                })
            replyTo(
                caller.peer,
                TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: listing.encode()),
                into: &actions)
        case .lookedUp(_, let caller, _, .failure(let error)), .listed(let caller, .failure(let error)):
            self.answer(caller, .journalUnavailable, error.description, into: &actions)
        case .maintained(.success(let measured)):
            jobBook.journalBytes = measured.bytes
            jobBook.overLimit = configuration.journalMaxBytes > 0 && measured.bytes >= configuration.journalMaxBytes
            // A full batch: more may have expired; the next tick deletes the next batch, so that
            // expiry keeps up with any steady load (a batch per tick, not per second).
            if measured.deleted >= Self.expiryBatch { nextJournalMaintenance = now }
        case .maintained(.failure(let error)):
            actions.append(.log(.warning, "journal: maintenance failed", ["error": "\(error)"]))
        }
    }

    private mutating func submittedJob(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard let pending = jobBook.pendingSubmits.removeValue(forKey: id) else { return }
        let service = pending.job.submission.service
        // Its first start was written with it (``JobBook/reserveStart(_:)``).
        let started = pending.job.phase == .preparing
        let written = (try? result.get()).map { $0.duplicates[id.bytes] == nil } ?? false
        if started && !written { jobBook.leavePipeline(service) }
        switch result {
        case .failure(let error):
            answer(pending.waiter, .journalUnavailable, error.description, into: &actions)
        case .success(let receipt):
            if let first = receipt.duplicates[id.bytes] {
                // Its idempotency key is taken: the answer names the first job.
                replyTo(
                    pending.waiter.peer,
                    TaskReply(
                        requestID: pending.waiter.requestID, attempt: pending.waiter.attempt, status: .ok,
                        body: first.id),
                    into: &actions)
                return
            }
            jobBook.submitted += 1
            replyTo(
                pending.waiter.peer,
                TaskReply(
                    requestID: pending.waiter.requestID, attempt: pending.waiter.attempt, status: .ok, body: id.bytes),
                into: &actions)
            var announced = pending.job
            announced.attempt = 0  // none has reached a worker, also when its first start is recorded
            publishJob(.jobSubmitted, announced, status: nil, into: &actions)
            if started {
                // Its start is on disk with it: it waits for a credit.
                jobBook.preparedWithSubmit(pending.job)
                offerJobs(of: service, now: now, into: &actions)
            } else {
                admit(pending.job, now: now, into: &actions)
            }
        }
    }

    /// Time passed: scheduled jobs that are due are queued, held waits that reached their
    /// hold are answered "not yet", and every ``Configuration/journalMaintenanceInterval`` the
    /// journal is asked to expire old outcomes and to measure itself.
    mutating func jobTick(now: Instant, budget: inout WorkBudget, into actions: inout [BrokerAction]) {
        lastNow = now
        let nowTicks = ticks(now)
        var services: Set<String> = []
        while budget.hasRoom, let first = jobBook.timers.min, first.due <= nowTicks {
            jobBook.timers.removeMin()
            if let waiter = first.waiter {
                guard jobBook.removeWaiter(waiter, of: first.id), let job = jobBook.jobs[first.id] else { continue }
                budget.spend()
                answer(waiter, report(job), into: &actions)
                continue
            }
            guard let job = jobBook.jobs[first.id], job.phase == .scheduled(due: first.due) else { continue }
            budget.spend()
            jobBook.enqueue(first.id)
            services.insert(job.submission.service)
        }
        for service in services { prepareJobs(of: service, into: &actions) }
        guard configuration.journal else { return }
        if now >= nextJournalMaintenance ?? now {
            nextJournalMaintenance = now + configuration.journalMaintenanceInterval
            actions.append(.journal(.maintain(nowMilliseconds: configuration.wallClock(), limit: Self.expiryBatch)))
            let unrecorded = jobBook.unrecorded
            jobBook.unrecorded.removeAll()
            for id in unrecorded {
                guard let job = jobBook.jobs[id], case .finishing(let report) = job.phase else { continue }
                writeOutcome(job, report, into: &actions)
            }
        }
    }

    /// The broker is stopping: every job caller it still owes an answer hears so, once (a lookup
    /// or listing whose journal read is in flight too: its late answer is dropped). A submit
    /// whose write is in flight may still be recorded; the client's retry carries the same
    /// idempotency key, so the restarted broker answers it with that job. A held wait, or a
    /// status or cancel waiting for an outcome being written, asks the restarted broker again
    /// (`brokerShuttingDown` is retried as an unreachable broker) instead of waiting out its
    /// attempt's timeout.
    mutating func answerJobCallersAtShutdown(_ message: String, into actions: inout [BrokerAction]) {
        for pending in jobBook.pendingSubmits.values {
            answer(pending.waiter, .brokerShuttingDown, message, into: &actions)
        }
        jobBook.pendingSubmits.removeAll()
        for caller in jobBook.reads {
            answer(caller, .brokerShuttingDown, message, into: &actions)
        }
        jobBook.reads.removeAll()
        for id in Array(jobBook.waiters.keys) {
            for waiter in jobBook.takeWaiters(of: id) {
                answer(waiter, .brokerShuttingDown, message, into: &actions)
            }
        }
    }

    // MARK: Answers

    private mutating func answer(_ caller: JobCaller, _ report: JobReport, into actions: inout [BrokerAction]) {
        replyTo(
            caller.peer,
            TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: report.encode()),
            into: &actions)
    }

    private mutating func answer(
        _ caller: JobCaller, _ status: ReplyStatus, _ message: String, into actions: inout [BrokerAction]
    ) {
        replyTo(
            caller.peer, .failure(caller.requestID, status, message: message, attempt: caller.attempt), into: &actions)
    }

    private mutating func publishJob(
        _ kind: EventKind, _ job: JobBook.Job, status: ReplyStatus?, into actions: inout [BrokerAction]
    ) {
        publishTask(
            kind,
            TaskInfo(
                requestID: job.id.description, service: job.submission.service, deliveries: Int(job.attempt),
                status: status?.description),
            into: &actions)
    }
}
