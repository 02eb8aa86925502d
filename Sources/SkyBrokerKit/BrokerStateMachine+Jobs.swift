import SkyJSON
import SkyJournal
import SkyProtocol
import SkyWire
import SkyZMQ

/// Durable jobs at the broker: what ``JobScheduler`` decides, done with the broker's workers,
/// credits and sockets.
///
/// At a worker a job is a request like any other (same handler, same credits), under the
/// reserved client number ``jobsClient``, which no peer can map to. A freed credit goes to a
/// waiting request if there is one (a caller waits on a deadline), else to the best prepared
/// job (``fill(_:at:now:into:)``), so a job backlog never delays `scan` traffic.
extension BrokerStateMachine {
    /// The client number jobs run under at workers.
    static let jobsClient: ClientNumber = ClientBook.jobs

    /// Whether `task` is a delivery of a job.
    static func isJob(_ task: QueuedRequest) -> Bool { task.client == jobsClient }

    /// Jobs the broker holds (unfinished), for snapshots and tests.
    package var jobCount: Int { jobs.heldCount }

    /// The jobs held in memory, for tests.
    var jobBook: JobBook { jobs.book }

    /// Feeds an input to the job scheduler and does what it asks, in order.
    @discardableResult
    mutating func withJobs<R>(
        now: Instant, into actions: inout [BrokerAction],
        _ input: (inout JobScheduler, inout [JobScheduler.Action]) -> R
    ) -> R {
        var asked: [JobScheduler.Action] = []
        let result = input(&jobs, &asked)
        for action in asked { perform(action, now: now, into: &actions) }
        return result
    }

    private mutating func perform(_ action: JobScheduler.Action, now: Instant, into actions: inout [BrokerAction]) {
        switch action {
        case .answer(let caller, let reply):
            replyTo(caller.peer, reply, into: &actions)
        case .journal(let work):
            actions.append(.journal(work))
        case .publish(let kind, let event):
            publishTask(
                kind,
                TaskInfo(
                    requestID: event.id.description, service: event.service, deliveries: Int(event.attempt),
                    status: event.status?.description, progress: event.progress, message: event.message),
                schedule: event.schedule, into: &actions)
        case .offer(let service):
            // Prepared jobs of `service` go to its workers with free credits.
            guard !jobStartsHeld else { return }
            for peer in workers(serving: service) {
                guard jobs.hasPrepared(for: service) else { return }
                if (readWorker(peer) { $0.freeCredits } ?? 0) > 0 { fill(peer, now: now, into: &actions) }
            }
        case .cancelAttempt(let id, let tag):
            let key = TaskKey(client: Self.jobsClient, requestID: id.requestID)
            tasks[key] = nil
            // Counted as it ends here: its worker's late reply only returns the credit.
            if let held = deliveries[tag], !held.answered {
                recordWindow(of: held.task.service) { $0.recordFailure(.cancelled) }
            }
            cancelAtWorker(key, tag: tag, into: &actions)
        case .log(let level, let message, let fields):
            // A store out of reach fails every write, one line per job: within the same budget
            // per line of text as what peers send wrong, so that an outage cannot flood the log.
            logAboutPeer(level, message, now: now, into: &actions) { fields }
        case .count(.refusedOverloaded):
            counters.rejectedOverloaded += 1
        case .count(.cancelled):
            counters.cancelled += 1
        case .count(.failedWorkerLost):
            counters.failedWorkerLost += 1
        case .count(.duplicate):
            counters.duplicateRequests += 1
        }
    }

    /// Whether the shared job store answered lately, as the shell sees it at each wake-up. A
    /// job handed to a worker while it does not could not have its outcome written here, and
    /// a standby that takes over would run it again: the prepared jobs wait (calls go on)
    /// until the store answers, or a standby takes over and this broker steps down.
    mutating func storeAnswering(_ answers: Bool, now: Instant, into actions: inout [BrokerAction]) {
        guard answers == jobStartsHeld else { return }
        jobStartsHeld = !answers
        if jobStartsHeld {
            actions.append(
                .log(
                    .warning,
                    "the job store does not answer: no job goes to a worker until it does (a standby that took over would run it again)"
                ))
            return
        }
        actions.append(.log(.warning, "the job store answers again: jobs go to workers"))
        for peer in workers.keys where (readWorker(peer) { $0.freeCredits } ?? 0) > 0 {
            fill(peer, now: now, into: &actions)
        }
    }

    /// Answers an `mmi.jobs.*` request; `false` if `request` names no job service.
    mutating func answerJobService(
        _ request: TaskRequest, for peer: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) -> Bool {
        let caller = JobCaller(peer: peer, requestID: request.requestID, attempt: request.header.attempt)
        if !keptCalls.isEmpty, request.service == BrokerService.jobStatus || request.service == BrokerService.jobWait,
            let id = JobID(bytes: request.body),
            answerAboutKeptCall(
                id, holding: request.service == BrokerService.jobWait, caller: caller, now: now, into: &actions)
        {
            return true
        }
        if !keptCalls.isEmpty, request.service == BrokerService.jobDescribe, let id = JobID(bytes: request.body),
            let details = keptCallDetails(id)
        {
            let body = (try? CanonicalJSON.encode(details)) ?? Array("{}".utf8)
            replyTo(
                peer, TaskReply(requestID: request.requestID, attempt: request.header.attempt, status: .ok, body: body),
                into: &actions)
            return true
        }
        let nowTicks = ticks(now)
        return withJobs(now: now, into: &actions) { $0.request(request, from: caller, now: nowTicks, into: &$1) }
    }

    /// The counts of jobs the journal saved: skywatch and skyweb count on from them.
    package mutating func totalsAtStart(_ totals: JobTotals) {
        jobs.totalsAtStart(totals)
    }

    /// The counts of jobs now (saved with the journal's maintenance, and at a clean stop); nil
    /// without a journal.
    package var jobTotals: JobTotals? { configuration.journal ? jobs.totals : nil }

    /// Takes in jobs the journal held when the broker started (queued, scheduled, or running
    /// when it stopped: these run again, their attempt counting on).
    /// - Returns: how many records could not be read (logged, left in the journal).
    @discardableResult
    package mutating func recover(_ records: [JobRecord], now: Instant, into actions: inout [BrokerAction]) -> Int {
        let nowTicks = ticks(now)
        return withJobs(now: now, into: &actions) { $0.recover(records, now: nowTicks, into: &$1) }
    }

    /// The journal did what ``BrokerAction/journal(_:)`` asked.
    package mutating func journalAnswered(_ answer: JournalAnswer, now: Instant, into actions: inout [BrokerAction]) {
        lastNow = now
        clockKeyRates(now)
        if case .written(.servicePaused(let name, let paused, let changed, let caller), let result) = answer {
            servicePauseWritten(
                name, paused: paused, changed: changed, caller: caller, result, now: now, into: &actions)
            return
        }
        if case .written(.serviceLimited(let name, let limit, let previous, let caller), let result) = answer {
            serviceLimitWritten(
                name, limit: limit, previous: previous, caller: caller, result, now: now, into: &actions)
            return
        }
        let nowTicks = ticks(now)
        withJobs(now: now, into: &actions) { $0.journalAnswered(answer, now: nowTicks, into: &$1) }
    }

    /// Sends the best prepared job of `service` to `peer` (its start is on disk), and prepares
    /// the next.
    mutating func dispatchJob(of service: String, to peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        guard let delivery = jobs.take(service) else { return }
        clients.addJobDelivery()
        // Its service is known: the worker it goes to serves it.
        let number = services.number(of: service) ?? ServiceBook.none
        let task = QueuedRequest(
            client: Self.jobsClient, request: delivery.request,
            arrival: delivery.order << Self.slotBits | UInt64(number), arrivedAt: ticks(now))
        let (tag, packed) = hand(task, to: peer)
        let worker = readWorker(peer) { $0.name } ?? peer.description
        if configuration.taskEvents {
            publishTask(
                .taskDispatched,
                TaskInfo(
                    requestID: delivery.request.requestID.description, service: service, deliveries: 1,
                    worker: peer.description),
                into: &actions)
        }
        // A job's wait is in the job scheduler, not here.
        send(delivery.request, waited: 0, tag: tag, packed: packed, delivery: 1, to: peer, into: &actions)
        withJobs(now: now, into: &actions) { $0.dispatched(delivery.id, tag: tag, worker: worker, into: &$1) }
    }

    /// A job's delivery came back because its worker was lost: queued again, or failed once
    /// workers were lost ``Configuration/maxDeliveries`` times running it.
    /// - Returns: whether it was queued again (the caller counts it with the requests it requeued).
    mutating func jobDeliveryLost(
        _ task: QueuedRequest, worker: String, now: Instant, into actions: inout [BrokerAction]
    ) -> Bool {
        let loss = withJobs(now: now, into: &actions) { jobs, asked -> JobScheduler.Loss? in
            jobs.deliveryLost(task.request.requestID, worker: worker, into: &asked)
        }
        guard let loss else { return false }
        finishRequest(Self.jobsClient)
        return loss == .requeued
    }

    /// The answer to one attempt of a job (a worker's reply, or one the broker made).
    mutating func jobAttemptEnded(_ reply: TaskReply, into actions: inout [BrokerAction]) {
        let now = lastNow ?? epoch ?? .now
        let nowTicks = ticks(now)
        withJobs(now: now, into: &actions) { $0.attemptEnded(reply, now: nowTicks, into: &$1) }
    }
}
