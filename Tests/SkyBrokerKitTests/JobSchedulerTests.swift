import SkyJournal
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The answers to `request` among `actions`.
private func answers(in actions: [JobScheduler.Action], to request: RequestID) -> [TaskReply] {
    actions.compactMap { action in
        guard case .answer(let caller, let reply) = action, caller.requestID == request else { return nil }
        return reply
    }
}

private func events(in actions: [JobScheduler.Action]) -> [EventKind] {
    actions.compactMap { if case .publish(let kind, _) = $0 { kind } else { nil } }
}

@Suite("Job scheduler: durable jobs' own state machine")
struct JobSchedulerTests {
    @Test func aSubmitIsAnsweredOnlyOnceOnDiskAndWaitsQueuedWhileNoWorkerServesIt() throws {
        var jobs = SchedulerHarness()
        let submit = RequestID(high: 1, low: 1)
        let asked = jobs.request(
            BrokerService.jobSubmit, JobSubmission(service: SchedulerHarness.service, body: [7]).encode(), submit)
        #expect(asked.count == 1, "only the journal write; no answer yet")
        guard case .journal(.write(let written, .submitted(let id)))? = asked.first,
            case .submitted(let record)? = written.first
        else {
            Issue.record("\(asked)")
            return
        }
        #expect(record.state == .queued && record.attempt == 0, "no credit: its first start is not written with it")
        let committed = jobs.commit(asked)
        #expect(answers(in: committed, to: submit) == [TaskReply(requestID: submit, status: .ok, body: id.bytes)])
        #expect(events(in: committed) == [.jobSubmitted])
        #expect(writes(in: committed).isEmpty, "nothing is prepared for a service no worker serves")
        #expect(jobs.scheduler.heldCount == 1 && jobs.scheduler.counts()?.queued == 1)
        #expect(jobs.scheduler.hasWork(for: SchedulerHarness.service) && !jobs.scheduler.hasPrepared)
    }

    @Test func aWorkersCreditsPrepareTheJobWhichRunsOnceItsStartIsOnDisk() throws {
        var jobs = SchedulerHarness()
        let (id, _) = jobs.submit(RequestID(high: 1, low: 1))
        let joined = jobs.joined(capacity: 1)
        #expect(writes(in: joined) == [.started(id)])
        #expect(jobs.scheduler.book.jobs[id]?.attempt == 1, "the attempt counts from its recorded start")
        let early = jobs.dispatch(tag: 1)
        #expect(early == nil, "not before its start is on disk")
        let started = jobs.commit(joined)
        #expect(started == [.offer(service: SchedulerHarness.service)])
        let dispatched1 = jobs.dispatch(tag: 5)
        let delivery = try #require(dispatched1)
        #expect(delivery.id == id && delivery.request.requestID == id.requestID)
        #expect(delivery.request.header.attempt == 1 && delivery.request.body == [7])

        let status = RequestID(high: 2, low: 1)
        let report = try JobReport(
            decoding: try #require(answers(in: jobs.ask(BrokerService.jobStatus, id, status), to: status).first).body)
        #expect(report.state == .running && report.worker == "w1" && report.attempt == 1)

        let ended = jobs.ended(TaskReply(requestID: id.requestID, status: .ok, body: [42]))
        #expect(ended.count == 1)
        guard case .journal(.writeWithNextCommit(_, .finished(id)))? = ended.first else {
            Issue.record("nobody waits: the outcome rides the next commit; got \(ended)")
            return
        }
        #expect(events(in: jobs.commit(ended)) == [.jobSucceeded])
        #expect(jobs.scheduler.heldCount == 0)
    }

    /// The counts of jobs start from what the journal saved and are saved with its maintenance
    /// when they changed since the last save, not otherwise.
    @Test func theCountsOfJobsStartFromTheJournalsAndAreSavedWhenTheyChanged() {
        var jobs = SchedulerHarness()
        jobs.scheduler.totalsAtStart(JobTotals(submitted: 10, succeeded: 6, failed: 3, cancelled: 1, retried: 2))
        func saved(_ actions: [JobScheduler.Action]) -> [JobTotals?] {
            actions.compactMap { if case .journal(.maintain(_, _, let totals)) = $0 { totals } else { nil } }
        }
        #expect(saved(jobs.tick()) == [nil], "unchanged since the start")
        let (id, _) = jobs.submit(RequestID(high: 1, low: 1))
        _ = jobs.commit(jobs.joined(capacity: 1))
        let delivery = jobs.dispatch(tag: 1)
        #expect(delivery != nil)
        _ = jobs.commit(jobs.ended(TaskReply(requestID: id.requestID, status: .ok, body: [42])))
        jobs.now += 1_000_000_000
        let expected = JobTotals(submitted: 11, succeeded: 7, failed: 3, cancelled: 1, retried: 2)
        #expect(saved(jobs.tick()) == [expected])
        #expect(jobs.scheduler.totals == expected)
        jobs.now += 1_000_000_000
        #expect(saved(jobs.tick()) == [nil], "saved already")
        // A maintenance that failed (a busy or unreachable store) may have saved nothing: the
        // next one saves the same counts again.
        var answered: [JobScheduler.Action] = []
        jobs.scheduler.journalAnswered(
            .maintained(.failure(.cannotConnect(store: "jobs.sqlite", reason: "busy"))), now: jobs.now,
            into: &answered)
        jobs.now += 1_000_000_000
        #expect(saved(jobs.tick()) == [expected], "saved again after a failed maintenance")
        jobs.now += 1_000_000_000
        #expect(saved(jobs.tick()) == [nil], "and then not again")
    }

    @Test func aFailedAttemptRunsAgainAfterItsBackoffWhichIsRecorded() throws {
        var jobs = SchedulerHarness()
        let (id, _) = jobs.submit(RequestID(high: 1, low: 1)) { $0.initialBackoffMilliseconds = 100 }
        _ = jobs.commit(jobs.joined(capacity: 1))
        let dispatched2 = jobs.dispatch(tag: 1)
        _ = try #require(dispatched2)

        let failed = jobs.ended(.failure(id.requestID, .deadlineExceeded, message: "too slow"))
        #expect(
            changes(in: failed) == [.rescheduled(id: id.bytes, notBefore: SchedulerHarness.wall + 100)],
            "a restarted broker waits out the backoff too")
        #expect(events(in: failed) == [.jobRetrying])
        jobs.now += 99_000_000
        #expect(jobs.tick().filter { if case .journal(.maintain) = $0 { false } else { true } }.isEmpty)
        jobs.now += 1_000_000
        let due = jobs.tick()
        #expect(writes(in: due).contains(.started(id)))
        #expect(jobs.scheduler.book.jobs[id]?.attempt == 2)
    }

    @Test func cancellingARunningJobCancelsItsAttemptAndAnswersOnceTheOutcomeIsOnDisk() throws {
        var jobs = SchedulerHarness()
        let (id, _) = jobs.submit(RequestID(high: 1, low: 1))
        _ = jobs.commit(jobs.joined(capacity: 1))
        let dispatched3 = jobs.dispatch(tag: 7)
        _ = try #require(dispatched3)

        let cancel = RequestID(high: 3, low: 1)
        let asked = jobs.ask(BrokerService.jobCancel, id, cancel)
        #expect(asked.contains(.cancelAttempt(id, tag: 7)) && asked.contains(.count(.cancelled)))
        #expect(answers(in: asked, to: cancel).isEmpty, "not before the outcome is on disk")
        guard case .journal(.write(_, .finished(id)))? = asked.last else {
            Issue.record("a caller waits: the outcome gets a commit of its own; got \(asked)")
            return
        }
        let recorded = jobs.commit(asked)
        let reply = try #require(answers(in: recorded, to: cancel).first)
        #expect(try JobReport(decoding: reply.body).state == .cancelled)
        #expect(events(in: recorded) == [.jobCancelled])
        #expect(
            jobs.ended(TaskReply(requestID: id.requestID, status: .ok, body: [1])).isEmpty,
            "the cancelled attempt's late reply changes nothing")
    }

    @Test func aJobWhoseWorkersAreLostRunsAgainUntilTheLimitThenFails() throws {
        var jobs = SchedulerHarness { $0.maxDeliveries = 2 }
        let (id, _) = jobs.submit(RequestID(high: 1, low: 1))
        _ = jobs.commit(jobs.joined(capacity: 1))
        let dispatched4 = jobs.dispatch(tag: 1)
        _ = try #require(dispatched4)

        var lost: [JobScheduler.Action] = []
        let loss = jobs.scheduler.deliveryLost(id.requestID, worker: "w1", into: &lost)
        #expect(loss == .requeued)
        #expect(writes(in: lost) == [.requeued(id)], "queued again on disk, not counted as running")
        var prepared: [JobScheduler.Action] = []
        jobs.scheduler.prepare(SchedulerHarness.service, into: &prepared)
        #expect(writes(in: prepared) == [.started(id)])
        _ = jobs.commit(prepared)
        let dispatched5 = jobs.dispatch(tag: 2)
        _ = try #require(dispatched5)

        var lostAgain: [JobScheduler.Action] = []
        let secondLoss = jobs.scheduler.deliveryLost(id.requestID, worker: "w2", into: &lostAgain)
        #expect(secondLoss == .failed)
        #expect(lostAgain.contains(.count(.failedWorkerLost)) && writes(in: lostAgain) == [.finished(id)])
        #expect(events(in: jobs.commit(lostAgain)) == [.jobFailed])
        var unknown: [JobScheduler.Action] = []
        let afterItEnded = jobs.scheduler.deliveryLost(id.requestID, worker: "w2", into: &unknown)
        #expect(afterItEnded == nil && unknown.isEmpty)
    }

    @Test func shutdownAnswersEveryCallerItOwesOnceAndRefusesLaterRequests() throws {
        var jobs = SchedulerHarness()
        let (held, _) = jobs.submit(RequestID(high: 1, low: 1))
        let pendingSubmit = RequestID(high: 1, low: 2)
        _ = jobs.request(
            BrokerService.jobSubmit, JobSubmission(service: SchedulerHarness.service, body: [1]).encode(),
            pendingSubmit)
        let wait = RequestID(high: 2, low: 1)
        #expect(jobs.ask(BrokerService.jobWait, held, wait).isEmpty, "held until the job ends or the hold runs out")
        let lookup = RequestID(high: 2, low: 2)
        let unknown = JobID(bytes: [UInt8](repeating: 9, count: 16))!
        let read = jobs.ask(BrokerService.jobStatus, unknown, lookup)
        #expect(read == [.journal(.lookup(unknown, jobs.caller(lookup), retry: false))])

        var stopped: [JobScheduler.Action] = []
        jobs.scheduler.shutdown("stopping", into: &stopped)
        for request in [pendingSubmit, wait, lookup] {
            #expect(answers(in: stopped, to: request).map(\.status) == [.brokerShuttingDown])
        }
        #expect(stopped.count == 3)
        #expect(jobs.journal(.lookedUp(unknown, jobs.caller(lookup), retry: false, .success(nil))).isEmpty)
        let late = RequestID(high: 3, low: 1)
        #expect(
            answers(in: jobs.ask(BrokerService.jobStatus, held, late), to: late).map(\.status) == [.brokerShuttingDown])
    }

    /// A clean stop takes back the starts prepared ahead (on disk too): the next broker counts
    /// only attempts that ran. A crash, which writes nothing, still counts them.
    @Test func aCleanStopTakesBackThePreparedStarts() throws {
        var jobs = SchedulerHarness()
        _ = jobs.commit(jobs.joined(capacity: 2))
        var ids: [JobID] = []
        for low: UInt64 in 1...3 {
            let (id, followed) = jobs.submit(RequestID(high: 1, low: low))
            _ = jobs.commit(followed)
            ids.append(id)
        }
        let sent = jobs.dispatch(tag: 1)
        let running = try #require(sent)
        var stopped: [JobScheduler.Action] = []
        jobs.scheduler.shutdown("stopping", into: &stopped)
        let released = changes(in: stopped).compactMap { change -> [UInt8]? in
            guard case .released(let id, let attempt) = change, attempt == 0 else { return nil }
            return id
        }
        #expect(Set(released) == Set(ids.filter { $0 != running.id }.map(\.bytes)), "the two prepared, not the running")
        // What ends while it stops prepares nothing more.
        let ended = jobs.ended(TaskReply(requestID: running.id.requestID, status: .ok, body: []))
        #expect(!changes(in: ended).contains { if case .started = $0 { true } else { false } })
    }

    @Test func aRefusedSubmitIsCountedAndNamesTheLimit() throws {
        var jobs = SchedulerHarness { $0.maxHeldJobs = 1 }
        _ = jobs.submit(RequestID(high: 1, low: 1))
        let second = RequestID(high: 1, low: 2)
        let refused = jobs.request(
            BrokerService.jobSubmit, JobSubmission(service: SchedulerHarness.service, body: [7]).encode(), second)
        #expect(refused.first == .count(.refusedOverloaded))
        let reply = try #require(answers(in: refused, to: second).first)
        #expect(reply.status == .overloaded)
        #expect(String(decoding: reply.body, as: UTF8.self).contains("1 jobs"))

        var without = SchedulerHarness { $0.journal = false }
        let none = RequestID(high: 2, low: 1)
        let answered = without.request(
            BrokerService.jobSubmit, JobSubmission(service: SchedulerHarness.service, body: [7]).encode(), none)
        #expect(answers(in: answered, to: none).map(\.status) == [.journalUnavailable])
        #expect(without.scheduler.counts() == nil)
    }

    /// The pipeline fills by arrival; a job of higher priority that finds it full takes the
    /// place of the worst prepared start, whose attempt is taken back.
    @Test func aFullPipelineGivesUpItsWorstStartForAJobOfHigherPriority() throws {
        var jobs = SchedulerHarness()
        _ = jobs.joined(capacity: 1)
        let depth = JobBook.pipelineDepth(credits: 1)
        var lows: [JobID] = []
        for low in 0..<depth {
            let (id, followed) = jobs.submit(RequestID(high: 1, low: UInt64(low)), priority: -1)
            #expect(writes(in: followed).isEmpty, "its first start was written with its submit")
            lows.append(id)
        }
        let (urgent, followed) = jobs.submit(RequestID(high: 2, low: 1), priority: 100)
        #expect(writes(in: followed) == [.released(lows[depth - 1]), .started(urgent)])
        #expect(jobs.scheduler.book.jobs[lows[depth - 1]]?.attempt == 0)
        _ = jobs.commit(followed)
        let first = jobs.dispatch(tag: 1)
        #expect(first?.id == urgent)
    }

    /// A submit of version 2 (``JobSubmission/confirmWithinMilliseconds``) whose write the
    /// journal has not confirmed within its bound, while the journal recorded nothing else
    /// either (a store that hangs), is answered `journalUnconfirmed` then, once; the write's
    /// result, when it comes, answers nobody, and a job it recorded runs.
    @Test func aSubmitTheStoreLeavesUnconfirmedIsAnsweredAtItsBoundAndRunsIfRecordedLater() throws {
        var jobs = SchedulerHarness()
        let submit = RequestID(high: 1, low: 1)
        var submission = JobSubmission(service: SchedulerHarness.service, body: [7])
        submission.confirmWithinMilliseconds = 850
        let asked = jobs.request(BrokerService.jobSubmit, submission.encode(), submit)
        guard case .journal(.write(let written, .submitted(let id)))? = asked.first,
            case .submitted(let record)? = written.first
        else {
            Issue.record("\(asked)")
            return
        }
        #expect(record.options.first == 1, "the bound is the submit's, not the job's: recorded as version 1")
        jobs.now = 849_000_000
        #expect(answers(in: jobs.tick(), to: submit).isEmpty)
        jobs.now = 850_000_000
        let late = answers(in: jobs.tick(), to: submit)
        #expect(late.map(\.status) == [.journalUnconfirmed])
        let message = String(decoding: late.first?.body ?? [], as: UTF8.self)
        #expect(message.contains("850 ms"))
        jobs.now = 3_000_000_000
        #expect(answers(in: jobs.tick(), to: submit).isEmpty, "answered once")
        let recorded = jobs.commit(asked)
        #expect(answers(in: recorded, to: submit).isEmpty, "its submitter was answered already")
        #expect(events(in: recorded) == [.jobSubmitted])
        #expect(jobs.scheduler.book.jobs[id] != nil, "the job is recorded, so it runs")

        // The same, and the write fails: nobody is answered twice.
        let other = RequestID(high: 1, low: 2)
        let failing = jobs.request(BrokerService.jobSubmit, submission.encode(), other)
        jobs.now += 850_000_000
        #expect(answers(in: jobs.tick(), to: other).map(\.status) == [.journalUnconfirmed])
        let failed = writes(in: failing).flatMap {
            jobs.journal(.written($0, .failure(.cannotConnect(store: "s", reason: "r"))))
        }
        #expect(answers(in: failed, to: other).isEmpty)
    }

    /// A journal that records other writes meanwhile is working through a backlog, not
    /// hanging: a submit behind them waits its turn, and is answered `journalUnconfirmed` only
    /// once the journal has recorded nothing for its bound.
    @Test func aSubmitBehindABacklogTheStoreWorksThroughWaitsItsTurn() throws {
        var jobs = SchedulerHarness()
        var submission = JobSubmission(service: SchedulerHarness.service, body: [7])
        submission.confirmWithinMilliseconds = 850
        let (first, second) = (RequestID(high: 1, low: 1), RequestID(high: 1, low: 2))
        let firstWrite = jobs.request(BrokerService.jobSubmit, submission.encode(), first)
        _ = jobs.request(BrokerService.jobSubmit, submission.encode(), second)
        jobs.now = 600_000_000
        #expect(answers(in: jobs.commit(firstWrite), to: first).map(\.status) == [.ok])
        jobs.now = 850_000_000
        #expect(answers(in: jobs.tick(), to: second).isEmpty, "the journal recorded a job 250 ms ago")
        jobs.now = 1_449_000_000
        #expect(answers(in: jobs.tick(), to: second).isEmpty)
        jobs.now = 1_450_000_000
        #expect(answers(in: jobs.tick(), to: second).map(\.status) == [.journalUnconfirmed])
    }

    /// A submission of version 1 (a peer that predates the bound, or asked for none) waits for
    /// the journal as before: answered with the write's result, however long it takes.
    @Test func aSubmitOfVersionOneWaitsForTheJournalAsBefore() throws {
        var jobs = SchedulerHarness()
        let submit = RequestID(high: 1, low: 1)
        let asked = jobs.request(
            BrokerService.jobSubmit, JobSubmission(service: SchedulerHarness.service, body: [7]).encode(), submit)
        jobs.now = 60_000_000_000
        #expect(answers(in: jobs.tick(), to: submit).isEmpty)
        let failed = writes(in: asked).flatMap {
            jobs.journal(.written($0, .failure(.cannotConnect(store: "s", reason: "r"))))
        }
        #expect(answers(in: failed, to: submit).map(\.status) == [.journalUnavailable])
    }

    /// A submit that repeats the idempotency key of a job the broker holds is answered with
    /// that job at once, without a write: also while the store does not answer. A key whose
    /// job is no longer held goes to the store, which keeps it through the job's retention.
    @Test func aRepeatedKeyOfAHeldJobIsAnsweredFromMemory() throws {
        var jobs = SchedulerHarness()
        let (first, _) = jobs.submit(RequestID(high: 1, low: 1)) { $0.idempotencyKey = "order-7" }
        var again = JobSubmission(service: SchedulerHarness.service, body: [9])
        again.idempotencyKey = "order-7"
        again.confirmWithinMilliseconds = 850
        let retry = RequestID(high: 1, low: 2)
        let answered = jobs.request(BrokerService.jobSubmit, again.encode(), retry)
        #expect(writes(in: answered).isEmpty, "the store is not asked")
        #expect(answers(in: answered, to: retry) == [TaskReply(requestID: retry, status: .ok, body: first.bytes)])

        // Ended and released, the job's key is the store's to answer.
        _ = jobs.commit(jobs.joined(capacity: 1))
        let dispatched = jobs.dispatch(tag: 1)
        let delivery = try #require(dispatched)
        _ = jobs.commit(jobs.ended(TaskReply(requestID: delivery.request.requestID, status: .ok, body: [1])))
        #expect(jobs.scheduler.book.jobs[first] == nil)
        let late = RequestID(high: 1, low: 3)
        #expect(writes(in: jobs.request(BrokerService.jobSubmit, again.encode(), late)).count == 1)
    }

    /// A unique job's key, recorded behind its hold's prefix: a second submit with it while
    /// the first waits returns the first; held while queued, the key is given up (on disk too)
    /// when the job is sent; held while running, when it ends, in the same write as its end
    /// (first). A client's key with the prefix is refused.
    @Test(arguments: [JobSubmission.KeyHold.whileQueued, .whileRunning])
    func aUniqueJobsKeyHoldsUntilItIsSentOrEnds(_ hold: JobSubmission.KeyHold) throws {
        var jobs = SchedulerHarness()
        func unique(_ submission: inout JobSubmission) {
            submission.idempotencyKey = "report"
            submission.keyHold = hold
        }
        let (first, followed) = jobs.submit(RequestID(high: 2, low: 1), change: unique)
        let recorded = changes(
            in: jobs.request(
                BrokerService.jobSubmit,
                {
                    var submission = JobSubmission(service: SchedulerHarness.service, body: [7])
                    unique(&submission)
                    return submission.encode()
                }(), RequestID(high: 2, low: 2)))
        #expect(recorded.isEmpty, "the held job answers it: \(recorded)")
        _ = followed
        #expect(jobs.scheduler.book.held(withKey: JobSubmission.recordedPrefix(of: hold) + "report") == first)

        _ = jobs.commit(jobs.joined(capacity: 1))
        var sent: [JobScheduler.Action] = []
        let dispatched = jobs.dispatch(tag: 1, into: &sent)
        let delivery = try #require(dispatched)
        #expect(changes(in: sent) == (hold == .whileQueued ? [.keyReleased(id: first.bytes)] : []))
        #expect(
            jobs.scheduler.book.held(withKey: JobSubmission.recordedPrefix(of: hold) + "report")
                == (hold == .whileQueued ? nil : first))
        let ended = jobs.ended(TaskReply(requestID: delivery.request.requestID, status: .ok, body: [1]))
        let finished = changes(in: ended)
        #expect(finished.first == (hold == .whileRunning ? .keyReleased(id: first.bytes) : finished.first))
        #expect(finished.count == (hold == .whileRunning ? 2 : 1), "\(finished)")

        var taken = JobSubmission(service: SchedulerHarness.service, body: [8])
        taken.idempotencyKey = "sky.unique/r/report"
        let refused = jobs.request(BrokerService.jobSubmit, taken.encode(), RequestID(high: 2, low: 3))
        #expect(answers(in: refused, to: RequestID(high: 2, low: 3)).first?.status == .invalidPayload)
    }

    /// A broker taking up its unfinished jobs reads a job's key from the journal's column, not
    /// from its recorded options: a unique job that gave up its key on disk holds none after
    /// the restart, one that did not holds it again.
    @Test func aRecoveredJobHoldsTheKeyTheJournalSaysItHolds() throws {
        var submission = JobSubmission(service: SchedulerHarness.service, body: [])
        submission.idempotencyKey = "sky.unique/q/refresh"
        func record(_ number: UInt8, key: String?) -> JobRecord {
            JobRecord(
                id: [UInt8](repeating: number, count: 16),
                service: SchedulerHarness.service, body: [number], priority: 0, notBefore: 0, idempotencyKey: key,
                expiresAt: .max, options: submission.encode())
        }
        var jobs = SchedulerHarness()
        var actions: [JobScheduler.Action] = []
        _ = jobs.scheduler.recover([record(1, key: nil)], now: 0, into: &actions)
        #expect(jobs.scheduler.book.held(withKey: "sky.unique/q/refresh") == nil, "given up on disk")
        var again = SchedulerHarness()
        _ = again.scheduler.recover([record(2, key: "sky.unique/q/refresh")], now: 0, into: &actions)
        #expect(again.scheduler.book.held(withKey: "sky.unique/q/refresh") != nil)
    }

    /// A key held for a time: a second submit within it returns the first job (from memory
    /// while it is held, from the store once it ended); the first submit after it takes the key
    /// from the first job, in one transaction with its own record.
    @Test func aKeyHeldForATimeIsTakenByTheFirstSubmitAfterIt() throws {
        let wall = Locked(SchedulerHarness.wall)
        var jobs = SchedulerHarness { $0.wallClock = { wall.withLock { $0 } } }
        func digest(_ body: UInt8) -> [UInt8] {
            var submission = JobSubmission(service: SchedulerHarness.service, body: [body])
            submission.idempotencyKey = "digest"
            submission.keyHold = .forTime
            submission.keyHoldMilliseconds = 10_000
            submission.retentionMilliseconds = 0  // raised to the hold: the key lives in the record
            return submission.encode()
        }
        func submitted(_ actions: [JobScheduler.Action]) -> JobID? {
            writes(in: actions).lazy.compactMap { if case .submitted(let id) = $0 { id } else { nil } }.first
        }
        let firstAsk = RequestID(high: 3, low: 1)
        let firstAsked = jobs.request(BrokerService.jobSubmit, digest(1), firstAsk)
        let first = try #require(submitted(firstAsked))
        _ = jobs.journal(.written(.submitted(first), .success(JournalReceipt())))

        wall.withLock { $0 += 5000 }
        let held = RequestID(high: 3, low: 2)
        let fromMemory = jobs.request(BrokerService.jobSubmit, digest(2), held)
        #expect(writes(in: fromMemory).isEmpty && answers(in: fromMemory, to: held).first?.body == first.bytes)

        _ = jobs.commit(jobs.joined(capacity: 1))
        let dispatched = jobs.dispatch(tag: 1)
        let delivery = try #require(dispatched)
        let endActions = jobs.ended(TaskReply(requestID: delivery.request.requestID, status: .ok, body: [1]))
        let ended = changes(in: endActions)
        #expect(ended.count == 1, "a key held for a time stays with the ended job: \(ended)")
        guard case .finished(_, _, _, let expiresAt, _, _, _) = ended.first else {
            Issue.record("\(ended)")
            return
        }
        #expect(expiresAt == SchedulerHarness.wall + 5000 + 10_000, "kept as long as its key holds")
        _ = jobs.commit(endActions)
        #expect(jobs.scheduler.book.jobs[first] == nil)
        let firstRecord = JobRecord(
            id: first.bytes, service: SchedulerHarness.service, body: [1], idempotencyKey: "sky.unique/t/digest",
            state: .succeeded, expiresAt: .max, submittedAt: SchedulerHarness.wall)

        wall.withLock { $0 += 3000 }
        let within = RequestID(high: 3, low: 3)
        let secondAsked = jobs.request(BrokerService.jobSubmit, digest(3), within)
        let second = try #require(submitted(secondAsked))
        let duplicate = JournalReceipt(duplicates: [second.bytes: firstRecord])
        let answered = jobs.journal(.written(.submitted(second), .success(duplicate)))
        #expect(answers(in: answered, to: within).first?.body == first.bytes, "within its time: the first job")

        wall.withLock { $0 += 3000 }
        let after = RequestID(high: 3, low: 4)
        let thirdAsked = jobs.request(BrokerService.jobSubmit, digest(4), after)
        let third = try #require(submitted(thirdAsked))
        let again = jobs.journal(
            .written(.submitted(third), .success(JournalReceipt(duplicates: [third.bytes: firstRecord]))))
        let rewritten = changes(in: again)
        #expect(rewritten.first == .keyExpired(id: first.bytes) && rewritten.count == 2, "\(rewritten)")
        #expect(answers(in: again, to: after).isEmpty, "answered once the key is its own")
        let done = jobs.journal(.written(.submitted(third), .success(JournalReceipt())))
        #expect(answers(in: done, to: after).first?.body == third.bytes)
    }
}
