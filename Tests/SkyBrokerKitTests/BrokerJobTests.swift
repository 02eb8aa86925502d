import Foundation
import SkyJSON
import SkyJournal
import Synchronization
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// A store out of reach fails every journal write, and each failure has a line: at most
/// `peerLinesPerSecond` of the same text a second, and one line for those held back (an
/// outage logged three lines in one millisecond, and one per job each second after it).
@Test func journalFailuresAreLoggedWithinABudgetPerLine() {
    var broker = BrokerHarness.withJournal()
    let error = JournalError.cannotConnect(store: "postgresql://sky@db/sky", reason: "the server did not answer")
    var lines = 0
    for _ in 0..<50 {
        lines +=
            broker.journal(.maintained(.failure(error))).filter {
                if case .log(_, "journal: maintenance failed", _) = $0 { true } else { false }
            }.count
    }
    #expect(lines == broker.machine.configuration.peerLinesPerSecond)
    let later = broker.advance(.seconds(1))
    #expect(
        later.contains {
            if case .log(_, "more lines like this were held back (the counters count every message)", let fields) = $0 {
                fields["heldBack"] == "40" && fields["line"] == "journal: maintenance failed"
            } else {
                false
            }
        }, "\(later)")
}

/// A wall clock a test moves by hand (milliseconds since 1970).
final class WallClock: Sendable {
    private let value: Mutex<Int64>
    init(_ start: Int64) { value = Mutex(start) }
    var now: Int64 {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

extension BrokerHarness {
    /// A broker with a journal, a fixed wall clock and fixed job ids.
    static func withJournal(_ change: (inout BrokerStateMachine.Configuration) -> Void = { _ in }) -> BrokerHarness {
        var configuration = BrokerStateMachine.Configuration()
        configuration.journal = true
        configuration.wallClock = { 1_700_000_000_000 }
        configuration.jobIDSeed = 1
        change(&configuration)
        return BrokerHarness(configuration)
    }

    /// The journal read `record` for the describe `request` of `client` asked: the details
    /// the broker answers.
    mutating func described(_ id: JobID, _ record: JobRecord, to client: PeerID, _ request: RequestID) throws
        -> JobDetails
    {
        let answered = journal(
            .described(id, JobCaller(peer: client, requestID: request, attempt: 1), .success((record, nil))))
        let reply = try #require(
            answered.compactMap { action -> TaskReply? in
                guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == request else { return nil }
                return reply
            }.first)
        return try CanonicalJSON.decode(JobDetails.self, from: reply.body)
    }

    mutating func journal(_ answer: JournalAnswer) -> [BrokerAction] {
        var actions: [BrokerAction] = []
        machine.journalAnswered(answer, now: now, into: &actions)
        return record(actions)
    }

    /// Answers every journal write among `actions` as durable (or failed), and returns what
    /// followed, answering the writes that those made too.
    mutating func commit(_ actions: [BrokerAction], failing: JournalError? = nil) -> [BrokerAction] {
        var followed: [BrokerAction] = []
        for purpose in journalWrites(actions) {
            let result: Result<JournalReceipt, JournalError> =
                failing.map { .failure($0) } ?? .success(JournalReceipt())
            followed += journal(.written(purpose, result))
        }
        return followed
    }

    /// Submits a job from `client` and commits it; returns the job's id.
    mutating func submit(
        _ client: PeerID, _ request: RequestID, service: String = "sky.scan", priority: Int8 = 0,
        change: (inout JobSubmission) -> Void = { _ in }
    ) -> (JobID, [BrokerAction]) {
        var submission = JobSubmission(service: service, body: [7])
        submission.priority = priority
        change(&submission)
        let asked = self.request(client, request, service: BrokerService.jobSubmit, body: submission.encode())
        let followed = commit(asked)
        let id = followed.lazy.compactMap { action -> JobID? in
            guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == request else { return nil }
            return JobID(bytes: reply.body)
        }.first
        return (id!, asked + followed)
    }

    mutating func ask(_ client: PeerID, _ request: RequestID, _ service: String, _ id: JobID) -> [BrokerAction] {
        self.request(client, request, service: service, body: id.bytes)
    }

    /// Commits every journal write and has `worker` answer every delivery, from `start` until
    /// nothing more happens; returns the requests in the order they were sent.
    mutating func runJobs(from start: [BrokerAction], at worker: PeerID, client: PeerID) -> [RequestID] {
        var order: [RequestID] = []
        var pending = start
        while !pending.isEmpty {
            let sent = dispatched(pending).map(\.1)
            order += sent
            var next = commit(pending)
            for request in sent { next += reply(worker, client: client, request) }
            pending = next
        }
        return order
    }

    /// Submits a job and answers its write; returns the job's id and what followed (its start
    /// or delivery, not yet committed).
    mutating func submitted(
        _ client: PeerID, _ request: RequestID, priority: Int8 = 0, change: (inout JobSubmission) -> Void = { _ in }
    ) -> (JobID, [BrokerAction]) {
        var submission = JobSubmission(service: "sky.scan", body: [7])
        submission.priority = priority
        change(&submission)
        let followed = commit(
            self.request(client, request, service: BrokerService.jobSubmit, body: submission.encode()))
        let id = followed.lazy.compactMap { action -> JobID? in
            guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == request else { return nil }
            return JobID(bytes: reply.body)
        }.first
        return (id!, followed)
    }

    /// Commits every journal write among `actions` and among what follows, until none is left;
    /// returns the requests sent to workers meanwhile, in order.
    mutating func settle(_ actions: [BrokerAction]) -> [RequestID] {
        var sent = dispatched(actions).map(\.1)
        var pending = actions
        while !journalWrites(pending).isEmpty {
            pending = commit(pending)
            sent += dispatched(pending).map(\.1)
        }
        return sent
    }
}

/// The reports answered to `request` among `actions`.
func reports(_ actions: [BrokerAction], to request: RequestID) -> [JobReport] {
    actions.compactMap { action in
        guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == request, reply.status == .ok else {
            return nil
        }
        return try? JobReport(decoding: reply.body)
    }
}

func journalLookups(_ actions: [BrokerAction]) -> Int {
    actions.count { if case .journal(.lookup) = $0 { true } else { false } }
}

/// The journal writes among `actions`, in a commit of their own or with the next.
func journalWrites(_ actions: [BrokerAction]) -> [JournalWrite] {
    actions.compactMap { action in
        switch action {
        case .journal(.write(_, let purpose)), .journal(.writeWithNextCommit(_, let purpose)): purpose
        default: nil
        }
    }
}

/// The journal writes among `actions` that wait for the journal's next commit.
func writesWithNextCommit(_ actions: [BrokerAction]) -> [JournalWrite] {
    actions.compactMap { if case .journal(.writeWithNextCommit(_, let purpose)) = $0 { purpose } else { nil } }
}

func journalFlushes(_ actions: [BrokerAction]) -> Int {
    actions.count { $0 == .journal(.flush) }
}

@Suite("Broker state machine: durable jobs")
struct BrokerJobTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    /// One peer's flood of waits holds at most its share: its next wait is answered at once
    /// ("not yet"), and another peer's wait is still held.
    @Test func onePeersWaitsHoldNoMoreThanItsShare() {
        var broker = BrokerHarness.withJournal()
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        for index in 0..<JobBook.maxWaitersPerPeer {
            #expect(broker.ask(client, RequestID(high: 3, low: UInt64(index)), BrokerService.jobWait, id).isEmpty)
        }
        let over = RequestID(high: 4, low: 1)
        #expect(reports(broker.ask(client, over, BrokerService.jobWait, id), to: over).map(\.state) == [.queued])
        let other = PeerID([0, 0, 0, 0, 7])
        #expect(broker.ask(other, RequestID(high: 5, low: 1), BrokerService.jobWait, id).isEmpty, "held")
        #expect(broker.machine.jobBook.waiterCount == JobBook.maxWaitersPerPeer + 1)
    }

    /// While a shared job store does not answer, no prepared job goes to a worker (a standby
    /// that took over would run it again); calls go on; once it answers, the jobs go.
    @Test func noJobGoesToAWorkerWhileTheStoreDoesNotAnswer() throws {
        var broker = BrokerHarness.withJournal()
        let (first, _) = broker.submitted(client, RequestID(high: 1, low: 1))
        let (second, _) = broker.submitted(client, RequestID(high: 1, low: 2))
        let started = broker.commit(broker.ready(worker1, capacity: 1))
        #expect(dispatched(started).map(\.1) == [first.requestID])
        var held: [BrokerAction] = []
        broker.machine.storeAnswering(false, now: broker.now, into: &held)
        #expect(broker.machine.jobStartsHeld)
        let replied = broker.commit(broker.reply(worker1, client: client, first.requestID))
        #expect(dispatched(replied).isEmpty, "the second waits: \(replied)")
        let call = RequestID(high: 0x0190_0000_0000_0001, low: 3)
        #expect(dispatched(broker.request(client, call)).map(\.1) == [call], "calls go on")
        _ = broker.reply(worker1, client: client, call)
        var answered: [BrokerAction] = []
        broker.machine.storeAnswering(true, now: broker.now, into: &answered)
        #expect(dispatched(answered).map(\.1) == [second.requestID], "\(answered)")
    }

    /// The same wait (peer, request id and attempt) sent again while it is held is held once,
    /// counted as a duplicate, and answered once; it takes one place of its peer's share.
    @Test func aWaitSentAgainWhileHeldIsAnsweredOnce() throws {
        var broker = BrokerHarness.withJournal()
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let wait = RequestID(high: 2, low: 2)
        for _ in 0..<50 { #expect(broker.ask(client, wait, BrokerService.jobWait, id).isEmpty) }
        #expect(broker.machine.jobBook.waiterCount == 1)
        #expect(broker.machine.counters.duplicateRequests == 49)
        let started = broker.commit(broker.ready(worker1))
        #expect(dispatched(started).map(\.1) == [id.requestID])
        let recorded = broker.commit(broker.reply(worker1, client: client, id.requestID))
        #expect(reports(recorded, to: wait).map(\.state) == [.succeeded])
        #expect(broker.machine.jobBook.waiterCount == 0)
        // Answered: the same id is a new wait now (read from the journal).
        #expect(journalLookups(broker.ask(client, wait, BrokerService.jobWait, id)) == 1)
    }

    @Test func aJobIsAnsweredRunAndReportedOnlyAfterEachStepIsOnDisk() throws {
        var broker = BrokerHarness.withJournal()
        let submitRequest = RequestID(high: 1, low: 1)
        let asked = broker.request(
            client, submitRequest, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        #expect(effects(asked).count == 1, "only the journal write; no answer yet")
        guard case .journal(.write(let changes, .submitted(let id)))? = effects(asked).first,
            case .submitted(let record)? = changes.first
        else {
            Issue.record("\(asked)")
            return
        }
        #expect(record.id == id.bytes && record.service == "sky.scan" && record.body == [7])
        let committed = broker.commit(asked)
        #expect(reports(committed, to: submitRequest).isEmpty)
        #expect(
            committed.contains(
                .sendToClient(client, .reply(TaskReply(requestID: submitRequest, status: .ok, body: id.bytes)))))

        // A worker joins: the delivery is recorded before it is sent.
        let joined = broker.ready(worker1)
        #expect(dispatched(joined).isEmpty)
        #expect(journalWrites(joined) == [.started(id)])
        let started = broker.commit(joined)
        #expect(dispatched(started).map(\.1) == [id.requestID])

        // A status while it runs; a wait that is answered once the outcome is on disk.
        let status = RequestID(high: 2, low: 1)
        #expect(reports(broker.ask(client, status, BrokerService.jobStatus, id), to: status).map(\.state) == [.running])
        let wait = RequestID(high: 2, low: 2)
        #expect(broker.ask(client, wait, BrokerService.jobWait, id).isEmpty)
        let replied = broker.reply(worker1, client: client, id.requestID)
        #expect(journalWrites(replied) == [.finished(id)])
        #expect(reports(replied, to: wait).isEmpty, "not before the outcome is on disk")
        let recorded = broker.commit(replied)
        let answer = try #require(reports(recorded, to: wait).first)
        #expect(answer.state == JobState.succeeded && answer.outcome == [42] && answer.attempt == 1)
        #expect(events(recorded).map(\.event) == [.jobSucceeded])
        #expect(broker.machine.jobCount == 0)
    }

    /// With task events on, a job's attempt is published as dispatched, as a call's is, and
    /// its describe answers with its times, worker and options from the journal and memory.
    @Test func aJobsDispatchIsPublishedAndItsDetailsDescribeIt() throws {
        var broker = BrokerHarness.withJournal { $0.taskEvents = true }
        let submitRequest = RequestID(high: 1, low: 1)
        var submission = JobSubmission(service: "sky.scan", body: [7])
        submission.concurrencyKey = "customer-42"
        let asked = broker.request(client, submitRequest, service: BrokerService.jobSubmit, body: submission.encode())
        guard case .journal(.write(let changes, .submitted(let id)))? = effects(asked).first,
            case .submitted(var record)? = changes.first
        else {
            Issue.record("\(asked)")
            return
        }
        _ = broker.commit(asked)
        let started = broker.commit(broker.ready(worker1))
        let published = events(started).filter { $0.event == .taskDispatched }
        #expect(published.count == 1 && published.first?.task?.requestID == id.requestID.description)
        #expect(published.first?.task?.worker == worker1.description)
        // Described while it runs: the record as the journal reads it, where it stands from memory.
        let describe = RequestID(high: 3, low: 1)
        let asking = broker.request(client, describe, service: BrokerService.jobDescribe, body: id.bytes)
        #expect(effects(asking).contains { if case .journal(.describe(id, _)) = $0 { true } else { false } })
        record.state = .running
        record.attempt = 1
        let details = try broker.described(id, record, to: client, describe)
        #expect(details.state == "running" && details.worker == "w-\(worker1)" && details.attempt == 1)
        #expect(details.startedAt == 1_700_000_000_000 && details.concurrencyKey == "customer-42")
        #expect(details.service == "sky.scan" && details.endedAt == nil && details.retriedAs == nil)
    }

    /// An outcome the journal could not record (a full disk) is told to nobody: the job shows
    /// as running, its waiters and later callers hear `journalUnavailable` at once (a cancel
    /// waited 30 s and heard a timeout that blamed the workers, and a listing showed the job
    /// ended, which it then was not after a restart), and the write tried again carries the
    /// time the job ended, not the time of the retry.
    @Test func anOutcomeTheJournalCouldNotRecordIsToldToNobodyAndItsCallersHearWhy() throws {
        let wall = WallClock(1_700_000_000_000)
        var broker = BrokerHarness.withJournal { $0.wallClock = { wall.now } }
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let started = broker.commit(broker.ready(worker1))
        #expect(dispatched(started).map(\.1) == [id.requestID])
        let wait = RequestID(high: 2, low: 1)
        #expect(broker.ask(client, wait, BrokerService.jobWait, id).isEmpty)
        let replied = broker.reply(worker1, client: client, id.requestID)
        #expect(journalWrites(replied) == [.finished(id)])
        let full = JournalError.cannotConnect(store: "/var/lib/sky/jobs.sqlite", reason: "the disk is full")
        wall.now += 5_000
        let failed = broker.commit(replied, failing: full)
        #expect(reports(failed, to: wait).map(\.state) == [.running], "the wait hears it as it was")
        // A status: at once, as it was, without a flush that would wait; a cancel hears why it
        // cannot act (it waited 30 s and heard a timeout that blamed the workers).
        let status = RequestID(high: 2, low: 2)
        let asked = broker.ask(client, status, BrokerService.jobStatus, id)
        #expect(reports(asked, to: status).map(\.state) == [.running])
        #expect(journalFlushes(asked) == 0)
        let cancel = RequestID(high: 2, low: 5)
        let cancelled = try #require(replies(broker.ask(client, cancel, BrokerService.jobCancel, id), to: cancel).first)
        #expect(cancelled.status == .journalUnavailable)
        #expect(
            RemoteErrorBody(decoding: cancelled.body).message.contains(
                "has ended succeeded, but the journal could not record it"))
        // A wait now waits, up to its hold, for the outcome.
        let held = RequestID(high: 2, low: 6)
        #expect(replies(broker.ask(client, held, BrokerService.jobWait, id), to: held).isEmpty)
        // Its details show it as it was: running.
        var record = JobRecord(
            id: id.bytes, service: "sky.scan", body: [7], state: .running, expiresAt: 0,
            options: JobSubmission(service: "sky.scan", body: [7]).encode())
        record.attempt = 1
        let describe = RequestID(high: 2, low: 3)
        _ = broker.request(client, describe, service: BrokerService.jobDescribe, body: id.bytes)
        #expect(try broker.described(id, record, to: client, describe).state == "running")
        // Written again at the next maintenance, with the time it ended.
        wall.now += 60_000
        let retried = broker.advance(.seconds(2))
        let ended = retried.compactMap { action -> Int64? in
            switch action {
            case .journal(.write(let changes, .finished(id))),
                .journal(.writeWithNextCommit(let changes, .finished(id))):
                for case .finished(_, _, _, _, _, let endedAt, _) in changes { return endedAt }
                return nil
            default:
                return nil
            }
        }
        #expect(ended == [1_700_000_000_000], "\(effects(retried))")
        let after = RequestID(high: 2, low: 4)
        #expect(
            replies(broker.ask(client, after, BrokerService.jobWait, id), to: after).isEmpty,
            "the write is in flight: it waits")
        let written = broker.commit(retried)
        #expect(reports(written, to: after).map(\.state) == [.succeeded])
        #expect(reports(written, to: held).map(\.state) == [.succeeded], "the held wait hears the outcome")
    }

    /// A cancel whose outcome the journal cannot record hears so: answered with the job's
    /// state (running, queued), it looked done, exited 0, and was lost with a broker stopped
    /// before the write.
    @Test func aCancelTheJournalCouldNotRecordSaysSo() throws {
        var broker = BrokerHarness.withJournal()
        let (running, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let started = broker.commit(broker.ready(worker1, capacity: 1))
        #expect(dispatched(started).map(\.1) == [running.requestID])
        let (queued, _) = broker.submit(client, RequestID(high: 1, low: 2))
        let full = JournalError.cannotConnect(store: "/var/lib/sky/jobs.sqlite", reason: "the disk is full")
        for (index, id) in [running, queued].enumerated() {
            let cancel = RequestID(high: 3, low: UInt64(index))
            let asked = broker.ask(client, cancel, BrokerService.jobCancel, id)
            let answered = try #require(replies(asked + broker.commit(asked, failing: full), to: cancel).first)
            #expect(answered.status == .journalUnavailable, "\(id)")
            #expect(
                RemoteErrorBody(decoding: answered.body).message.contains(
                    "has ended cancelled, but the journal could not record it"))
        }
    }

    /// An outcome nobody waits for rides the journal's next commit (one fsync less per job at
    /// low rates); one a caller waits for gets a commit of its own, and a caller that comes
    /// while it waits for the next commit flushes it.
    @Test func anOutcomeNobodyWaitsForWaitsForTheNextCommitAndACallerFlushesIt() throws {
        var broker = BrokerHarness.withJournal()
        let (first, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let (second, _) = broker.submit(client, RequestID(high: 1, low: 2))
        let (third, _) = broker.submit(client, RequestID(high: 1, low: 3))
        let started = broker.commit(broker.ready(worker1, capacity: 3))
        #expect(Set(dispatched(started).map(\.1)) == [first.requestID, second.requestID, third.requestID])

        // Nobody waits: with the next commit; a status then flushes it and hears once it is written.
        let unwaited = broker.reply(worker1, client: client, first.requestID)
        #expect(writesWithNextCommit(unwaited) == [.finished(first)])
        #expect(journalFlushes(unwaited) == 0)
        let status = RequestID(high: 2, low: 1)
        let asked = broker.ask(client, status, BrokerService.jobStatus, first)
        #expect(journalFlushes(asked) == 1)
        #expect(reports(asked, to: status).isEmpty, "not before the outcome is on disk")
        #expect(reports(broker.commit(unwaited), to: status).map(\.state) == [.succeeded])

        // A held wait: a commit of its own.
        let wait = RequestID(high: 2, low: 2)
        #expect(broker.ask(client, wait, BrokerService.jobWait, second).isEmpty)
        let waited = broker.reply(worker1, client: client, second.requestID)
        #expect(journalWrites(waited) == [.finished(second)] && writesWithNextCommit(waited).isEmpty)
        #expect(reports(broker.commit(waited), to: wait).map(\.state) == [.succeeded])

        // A cancel of a job whose outcome waits for the next commit flushes it too.
        let late = broker.reply(worker1, client: client, third.requestID)
        #expect(writesWithNextCommit(late) == [.finished(third)])
        let cancel = RequestID(high: 2, low: 3)
        let cancelled = broker.ask(client, cancel, BrokerService.jobCancel, third)
        #expect(journalFlushes(cancelled) == 1 && journalWrites(cancelled).isEmpty)
        #expect(reports(broker.commit(late), to: cancel).map(\.state) == [.succeeded])
    }

    @Test func higherPriorityJobsRunFirstWithinAService() {
        var broker = BrokerHarness.withJournal()
        let (low, _) = broker.submit(client, RequestID(high: 1, low: 1), priority: -50)
        let (urgent, _) = broker.submit(client, RequestID(high: 1, low: 2), priority: 100)
        let (normal, _) = broker.submit(client, RequestID(high: 1, low: 3), priority: 0)
        // One credit: each reply frees it for the best prepared job.
        let order = broker.runJobs(from: broker.ready(worker1, capacity: 1), at: worker1, client: client)
        #expect(order == [urgent, normal, low].map(\.requestID))
    }

    @Test func aWaitingRequestGoesBeforeAnOlderWaitingJob() {
        var broker = BrokerHarness.withJournal()
        let (job, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let call = RequestID(high: 5, low: 5)
        _ = broker.request(client, call)
        let joined = broker.ready(worker1, capacity: 1)
        #expect(dispatched(joined).map(\.1) == [call], "the call takes the one credit")
        #expect(journalWrites(joined) == [.started(job)], "the job's delivery is prepared meanwhile")
        #expect(dispatched(broker.commit(joined)).isEmpty, "prepared, it waits for the credit")
        let after = broker.reply(worker1, client: client, call)
        #expect(dispatched(after).map(\.1) == [job.requestID], "then the job, at once")
    }

    @Test func aFreedCreditTakesAPreparedJobWithoutWaitingForTheJournal() {
        var broker = BrokerHarness.withJournal()
        let (first, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let (second, _) = broker.submit(client, RequestID(high: 1, low: 2))
        let joined = broker.ready(worker1, capacity: 1)
        #expect(journalWrites(joined) == [.started(first), .started(second)], "prepared ahead of the one credit")
        let committed = broker.commit(joined)
        #expect(dispatched(committed).map(\.1) == [first.requestID])
        let status = RequestID(high: 2, low: 1)
        let prepared = reports(broker.ask(client, status, BrokerService.jobStatus, second), to: status)
        #expect(prepared.map(\.state) == [.queued] && prepared.map(\.attempt) == [0], "not delivered yet")
        // The reply frees the credit: the prepared job goes in the same step, no commit between.
        let replied = broker.reply(worker1, client: client, first.requestID)
        #expect(dispatched(replied).map(\.1) == [second.requestID])
        #expect(journalWrites(replied) == [.finished(first)])
    }

    @Test func aJobItsWorkersHaveRoomForIsRecordedStartedWithItsSubmitAndSentOnceOnDisk() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 1)
        let request = RequestID(high: 1, low: 1)
        let asked = broker.request(
            client, request, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        guard case .journal(.write(let changes, .submitted(let id)))? = effects(asked).first,
            case .submitted(let record)? = changes.first
        else {
            Issue.record("\(asked)")
            return
        }
        #expect(changes.count == 1 && record.state == .running && record.attempt == 1, "one write: submit and start")
        let committed = broker.commit(asked)
        #expect(dispatched(committed).map(\.1) == [id.requestID], "sent once on disk, no second write")
        #expect(journalWrites(committed).isEmpty)
        #expect(events(committed).map(\.event) == [.jobSubmitted] && events(committed).first?.task?.deliveries == 0)

        // The credit is busy: the next job too is started with its submit, then waits for it.
        let (second, secondActions) = broker.submit(client, RequestID(high: 1, low: 2))
        #expect(journalWrites(secondActions) == [.submitted(second)] && dispatched(secondActions).isEmpty)
        let replied = broker.reply(worker1, client: client, id.requestID)
        #expect(dispatched(replied).map(\.1) == [second.requestID])
        let report = try #require(
            reports(
                broker.ask(client, RequestID(high: 2, low: 1), BrokerService.jobStatus, second),
                to: RequestID(high: 2, low: 1)
            ).first)
        #expect(report.state == .running && report.attempt == 1)
    }

    @Test func aSubmitThatIsNotWrittenGivesBackItsPlaceInThePipeline() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 1)
        let depth = JobBook.pipelineDepth(credits: 1)
        var key = 0
        func submission() -> [UInt8] {
            key += 1
            var submission = JobSubmission(service: "sky.scan", body: [7])
            submission.idempotencyKey = "key-\(key)"
            return submission.encode()
        }
        // A full pipeline's worth of failed writes, and as many taken keys.
        for index in 0..<depth {
            let asked = broker.request(
                client, RequestID(high: 1, low: UInt64(index)), service: BrokerService.jobSubmit, body: submission())
            _ = broker.commit(asked, failing: .full(path: "/state/jobs.sqlite"))
        }
        for index in 0..<depth {
            let asked = broker.request(
                client, RequestID(high: 2, low: UInt64(index)), service: BrokerService.jobSubmit, body: submission())
            guard case .journal(.write(let changes, let purpose))? = effects(asked).first,
                case .submitted(let record)? = changes.first
            else { continue }
            let first = JobRecord(id: [UInt8](repeating: 9, count: 16), service: "sky.scan", body: [7], expiresAt: 0)
            _ = broker.journal(.written(purpose, .success(JournalReceipt(duplicates: [record.id: first]))))
        }
        let (id, actions) = broker.submit(client, RequestID(high: 3, low: 1))
        #expect(dispatched(actions).map(\.1) == [id.requestID], "the pipeline still has room")
    }

    @Test func jobsArePreparedUpToThePipelineDepthAndOneMoreForEachSent() {
        var broker = BrokerHarness.withJournal()
        let depth = JobBook.pipelineDepth(credits: 1)
        let ids = (0...depth).map { broker.submit(client, RequestID(high: 1, low: UInt64($0))).0 }
        let joined = broker.ready(worker1, capacity: 1)
        #expect(journalWrites(joined) == ids.prefix(depth).map { .started($0) }, "the last stays queued")
        let committed = broker.commit(joined)
        #expect(dispatched(committed).map(\.1) == [ids[0].requestID])
        #expect(journalWrites(committed) == [.started(ids[depth])], "one sent, one more prepared")
        #expect(JobBook.pipelineDepth(credits: 0) == 0, "nothing is prepared for a service no worker serves")
    }

    @Test func aWorkerAnnouncingAbsurdCreditsGetsABoundedPipeline() {
        var broker = BrokerHarness.withJournal()
        let ids = (0..<1500).map { broker.submit(client, RequestID(high: 1, low: UInt64($0))).0 }
        let joined = broker.ready(worker1, capacity: WorkerToBroker.maxCapacity)
        #expect(journalWrites(joined).count == JobBook.maxPipelineDepth)
        #expect(ids.count > JobBook.maxPipelineDepth)
    }

    @Test func aJobWaitsForAWorkerPastTheNoWorkersGraceAndTheMaximumWait() {
        var broker = BrokerHarness.withJournal { $0.maxWait = .seconds(5) }
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let later = broker.advance(.seconds(60))
        #expect(later.allSatisfy { if case .sendToClient = $0 { false } else { true } })
        let status = RequestID(high: 2, low: 1)
        #expect(reports(broker.ask(client, status, BrokerService.jobStatus, id), to: status).map(\.state) == [.queued])
    }

    @Test func aJobCancelledWhileItsDeliveryIsPreparedIsNeverSent() throws {
        var broker = BrokerHarness.withJournal()
        let (first, _) = broker.submit(client, RequestID(high: 1, low: 1))
        let (second, _) = broker.submit(client, RequestID(high: 1, low: 2))
        let joined = broker.ready(worker1, capacity: 1)
        #expect(journalWrites(joined) == [.started(first), .started(second)])
        let cancel = RequestID(high: 3, low: 1)
        let cancelled = broker.ask(client, cancel, BrokerService.jobCancel, first)
        #expect(journalWrites(cancelled) == [.released(first), .finished(first)])
        #expect(cancelled.allSatisfy { if case .sendToWorker = $0 { false } else { true } })
        // The starts are on disk: the cancelled job is not sent, the credit goes to the second.
        #expect(dispatched(broker.commit(joined)).map(\.1) == [second.requestID])
        #expect(reports(broker.commit(cancelled), to: cancel).map(\.state) == [.cancelled])
    }

    @Test func aShutdownAnswersEveryJobCallerItOwesOnceAndJobCallsWhileItStops() {
        var broker = BrokerHarness.withJournal()
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.commit(broker.ready(worker1))
        let wait = RequestID(high: 2, low: 1)
        #expect(broker.ask(client, wait, BrokerService.jobWait, id).isEmpty, "held while the job runs")
        let submit = RequestID(high: 3, low: 1)
        let asked = broker.request(
            client, submit, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        #expect(replies(asked).isEmpty, "its write is in flight")
        let lookup = RequestID(high: 3, low: 2)
        let unknown = JobID(bytes: [UInt8](repeating: 7, count: 16))!
        let looking = broker.ask(client, lookup, BrokerService.jobStatus, unknown)
        guard case .journal(.lookup(_, let caller, _))? = effects(looking).first else {
            Issue.record("\(looking)")
            return
        }

        var stopped: [BrokerAction] = []
        broker.machine.shutdown(now: broker.now, into: &stopped)
        #expect(replies(stopped).map(\.1.requestID).count == 3, "each once")
        #expect(Set(replies(stopped).map(\.1.requestID)) == [wait, submit, lookup])
        #expect(replies(stopped).allSatisfy { $0.1.status == .brokerShuttingDown })
        // The write lands, and the read comes back, after all: no second answer.
        #expect(replies(broker.commit(asked)).isEmpty)
        #expect(replies(broker.journal(.lookedUp(unknown, caller, retry: false, .success(nil)))).isEmpty)
        // A wait, a status or a listing while it stops is answered at once, never held.
        for (index, service) in [BrokerService.jobWait, BrokerService.jobStatus, BrokerService.jobCancel].enumerated() {
            let request = RequestID(high: 4, low: UInt64(index))
            #expect(replies(broker.ask(client, request, service, id)).map(\.1.status) == [.brokerShuttingDown])
        }
        let listed = broker.request(
            client, RequestID(high: 5, low: 1), service: BrokerService.jobList, body: JobQuery(limit: 10).encode())
        #expect(replies(listed).map(\.1.status) == [.brokerShuttingDown] && journalWrites(listed).isEmpty)
    }

    @Test func lookupsAwaitingTheJournalAreBoundedAndACallAskedTwiceIsReadAndAnsweredOnce() {
        var broker = BrokerHarness.withJournal { $0.queueLimit = 3 }
        let unknown = JobID(bytes: [UInt8](repeating: 7, count: 16))!
        var reads: [BrokerAction] = []
        for index in 0..<3 {
            reads += broker.ask(client, RequestID(high: 1, low: UInt64(index)), BrokerService.jobStatus, unknown)
        }
        #expect(reads.count == 3 && replies(reads).isEmpty)
        // The same call again while its read is in flight: no second read, no second answer.
        #expect(broker.ask(client, RequestID(high: 1, low: 0), BrokerService.jobStatus, unknown).isEmpty)
        let refused = broker.ask(client, RequestID(high: 2, low: 1), BrokerService.jobWait, unknown)
        #expect(replies(refused).map(\.1.status) == [.overloaded] && effects(refused).count == 1)
        var answered: [BrokerAction] = []
        for case .journal(.lookup(let id, let caller, let retry)) in reads {
            answered += broker.journal(.lookedUp(id, caller, retry: retry, .success(nil)))
            answered += broker.journal(.lookedUp(id, caller, retry: retry, .success(nil)))
        }
        #expect(replies(answered).map(\.1.requestID) == (0..<3).map { RequestID(high: 1, low: UInt64($0)) })
        #expect(reports(answered, to: RequestID(high: 1, low: 0)).map(\.state) == [.unknown])
        let again = broker.ask(client, RequestID(high: 3, low: 1), BrokerService.jobStatus, unknown)
        #expect(journalLookups(again) == 1, "room again once the reads came back")
    }

    @Test func aFailedSubmitWriteIsAnsweredJournalUnavailableAndNothingRuns() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        let request = RequestID(high: 1, low: 1)
        let asked = broker.request(
            client, request, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        let failed = broker.commit(asked, failing: .full(path: "/state/jobs.sqlite"))
        guard case .sendToClient(_, .reply(let reply))? = failed.first else {
            Issue.record("\(failed)")
            return
        }
        #expect(reply.status == .journalUnavailable)
        #expect(RemoteErrorBody(decoding: reply.body).message.contains("/state/jobs.sqlite"))
        #expect(dispatched(failed).isEmpty && journalWrites(failed).isEmpty)
    }

    @Test func anIdempotencyKeyTakenInTheJournalAnswersTheFirstJobAndQueuesNothing() {
        var broker = BrokerHarness.withJournal()
        let request = RequestID(high: 1, low: 1)
        var submission = JobSubmission(service: "sky.scan", body: [7])
        submission.idempotencyKey = "order-1"
        let asked = broker.request(client, request, service: BrokerService.jobSubmit, body: submission.encode())
        guard case .journal(.write(let changes, let purpose))? = effects(asked).first,
            case .submitted(let record)? = changes.first
        else {
            Issue.record("\(asked)")
            return
        }
        let first = JobRecord(id: [UInt8](repeating: 9, count: 16), service: "sky.scan", body: [7], expiresAt: 0)
        let answered = broker.journal(.written(purpose, .success(JournalReceipt(duplicates: [record.id: first]))))
        #expect(answered == [.sendToClient(client, .reply(TaskReply(requestID: request, status: .ok, body: first.id)))])
        #expect(broker.machine.jobCount == 0)
    }

    @Test func anOutcomeWhoseWriteFailedIsWrittenAgainAndItsWaitersHearThen() {
        var broker = BrokerHarness.withJournal()
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.commit(broker.ready(worker1))
        let wait = RequestID(high: 2, low: 1)
        _ = broker.ask(client, wait, BrokerService.jobWait, id)
        let replied = broker.reply(worker1, client: client, id.requestID)
        let failed = broker.commit(replied, failing: .failed(path: "j", operation: "write", reason: "I/O"))
        #expect(reports(failed, to: wait).map(\.state) == [.running], "told as it was, not kept waiting")
        // A failing journal shows in the counts (metrics, skywatch, skyweb), not only in the log.
        #expect(broker.machine.jobs.counts()?.journalFailing == true)
        #expect(broker.machine.jobs.counts()?.journalFailures == 1)
        // The next maintenance writes it again; a wait then hears once it is written.
        let retried = broker.advance(.seconds(2))
        #expect(journalWrites(retried) == [.finished(id)])
        let again = RequestID(high: 2, low: 2)
        #expect(replies(broker.ask(client, again, BrokerService.jobWait, id), to: again).isEmpty)
        let written = broker.commit(retried)
        #expect(reports(written, to: again).map(\.state) == [.succeeded])
        #expect(broker.machine.jobs.counts()?.journalFailing == false)
        #expect(logs(written).contains("journal: writes succeed again"))
    }

    /// Per-job events are built only for a topic someone subscribed to; their numbers are
    /// taken all the same.
    @Test func jobEventsAreBuiltOnlyWhileATopicTakesThemAndNumbersCountOn() {
        var broker = BrokerHarness.withJournal()
        broker.machine.eventSubscription([], subscribed: false)
        broker.keepsRecord = true
        _ = broker.commit(broker.ready(worker1, capacity: 4))
        let (quiet, submitted) = broker.submit(client, RequestID(high: 1, low: 1))
        let ran = broker.runJobs(from: submitted, at: worker1, client: client)
        #expect(ran == [quiet.requestID])
        #expect(events(broker.recorded).allSatisfy { $0.task == nil }, "no job event built unwatched")
        broker.machine.eventSubscription(Array("worker.".utf8), subscribed: true)
        let (_, second) = broker.submit(client, RequestID(high: 1, low: 2))
        _ = broker.runJobs(from: second, at: worker1, client: client)
        #expect(events(broker.recorded).allSatisfy { $0.task == nil }, "a topic of other events takes none")
        broker.machine.eventSubscription(Array("job.".utf8), subscribed: true)
        let (_, third) = broker.submit(client, RequestID(high: 1, low: 3))
        _ = broker.runJobs(from: third, at: worker1, client: client)
        let jobEvents = events(broker.recorded).filter { $0.task != nil }
        #expect(jobEvents.map(\.event) == [.jobSubmitted, .jobSucceeded])
        // Two unwatched per job before it (submitted, succeeded) and the worker's connection.
        #expect(jobEvents.first?.seq == 6, "numbers counted on while nobody watched")
    }

    @Test func aHeldWaitIsAnsweredNotYetAfterTheHoldAndARetryableFailureIsRetriedAfterItsBackoff() {
        var broker = BrokerHarness.withJournal { $0.jobWaitHold = .seconds(2) }
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1)) {
            $0.retryOn = [.handlerError]
            $0.initialBackoffMilliseconds = 1000
        }
        _ = broker.commit(broker.ready(worker1))
        let wait = RequestID(high: 2, low: 1)
        _ = broker.ask(client, wait, BrokerService.jobWait, id)
        let failed = broker.reply(worker1, client: client, id.requestID, status: .handlerError)
        // Not an outcome: another attempt comes, after a backoff the journal keeps across restarts.
        let backoff = failed.compactMap { action -> JobChange? in
            if case .journal(.write(let changes, .rescheduled(id))) = action { changes.first } else { nil }
        }
        let notBefore: Int64 = 1_700_000_000_000 + 1000
        let rescheduled: JobChange = .rescheduled(id: id.bytes, notBefore: notBefore)
        #expect(backoff == [rescheduled])
        #expect(events(failed).map(\.event) == [.jobRetrying])
        #expect(dispatched(broker.commit(broker.advance(.milliseconds(500)))).isEmpty, "within the backoff")
        let again = broker.commit(broker.advance(.milliseconds(600)))
        #expect(dispatched(again).map(\.1) == [id.requestID])
        let held = broker.advance(.seconds(1))
        #expect(reports(held, to: wait).map(\.state) == [.running], "the hold ended: not yet")
    }

    /// Issue 44.2: the pipeline of prepared starts (at least 32) was filled in order of arrival,
    /// so with a worker busy and 32 or more low-priority jobs waiting, the high-priority jobs
    /// submitted after them stayed queued behind it, and the oldest lows ran first. However many
    /// wait, and whether a freed credit comes before or after the high jobs' starts are on disk,
    /// every job waiting with a higher priority runs before any lower one not yet sent.
    @Test(arguments: [31, 32, 40, 1000], [1, 4])
    func jobsOfHigherPriorityRunBeforeLowerOnesHoweverManyArePreparedAhead(lows: Int, capacity: Int) {
        for startsOnDiskFirst in [true, false] {
            var broker = BrokerHarness.withJournal()
            broker.keepsRecord = true
            var request: UInt64 = 0
            func next() -> RequestID {
                request += 1
                return RequestID(high: 1, low: request)
            }
            var running = broker.settle(broker.ready(worker1, capacity: UInt32(capacity)))
            for _ in 0..<capacity {
                let (_, followed) = broker.submitted(client, next())
                running += broker.settle(followed)
            }
            #expect(running.count == capacity, "the worker is busy")
            var lowIDs: [RequestID] = []
            for _ in 0..<lows {
                let (id, followed) = broker.submitted(client, next(), priority: -10)
                lowIDs.append(id.requestID)
                #expect(broker.settle(followed).isEmpty)
            }
            var highIDs: [RequestID] = []
            var highFollowed: [BrokerAction] = []
            for _ in 0..<3 {
                let (id, followed) = broker.submitted(client, next(), priority: 10)
                highIDs.append(id.requestID)
                highFollowed += followed
            }
            if startsOnDiskFirst {
                #expect(broker.settle(highFollowed).isEmpty)
                highFollowed = []
            }
            // One credit frees at a time; what it frees commits after the reply's own step.
            var order: [RequestID] = []
            while !running.isEmpty {
                let done = running.removeFirst()
                let sent = broker.settle(broker.reply(worker1, client: client, done) + highFollowed)
                highFollowed = []
                order += sent
                running += sent
            }
            let label = "lows \(lows), capacity \(capacity), starts on disk first \(startsOnDiskFirst)"
            let highsRanAt = order.indices.filter { highIDs.contains(order[$0]) }
            #expect(highsRanAt == [0, 1, 2], "\(label): the highs ran at \(highsRanAt) of \(order.count)")
            #expect(order.filter { !highIDs.contains($0) } == lowIDs, "\(label): the lows ran oldest first")
            #expect(Array(order.prefix(3)) == highIDs, "\(label): the highs ran oldest first")
            let succeeded = events(broker.recorded).filter { $0.event == .jobSucceeded }
            #expect(succeeded.count == capacity + lows + 3)
            #expect(
                succeeded.allSatisfy { $0.task?.deliveries == 1 },
                "\(label): a start taken back is not counted: every job ran once, as attempt 1")
        }
    }

    /// A start taken back for a better job is recorded with the attempt taken back, and the
    /// job's status says queued with no attempt, as before it was prepared.
    @Test func aStartTakenBackForABetterJobIsRecordedAndReportedAsNeverMade() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.settle(broker.ready(worker1, capacity: 1))
        _ = broker.settle(broker.submitted(client, RequestID(high: 1, low: 0)).1)
        let depth = JobBook.pipelineDepth(credits: 1)
        let lows = (1...depth).map { index in
            let (id, followed) = broker.submitted(client, RequestID(high: 1, low: UInt64(index)), priority: -10)
            _ = broker.settle(followed)
            return id
        }
        let (high, followed) = broker.submitted(client, RequestID(high: 2, low: 1), priority: 10)
        let released = followed.compactMap { action -> [JobChange]? in
            if case .journal(.writeWithNextCommit(let changes, .released)) = action { changes } else { nil }
        }
        #expect(released == [[.released(id: lows[depth - 1].bytes, attempt: 0)]], "the youngest low gives way")
        #expect(journalWrites(followed) == [.released(lows[depth - 1]), .started(high)])
        let status = RequestID(high: 3, low: 1)
        let report = try #require(
            reports(broker.ask(client, status, BrokerService.jobStatus, lows[depth - 1]), to: status).first)
        #expect(report.state == .queued && report.attempt == 0)
        #expect(broker.machine.jobBook.jobs[lows[depth - 1]]?.attempt == 0)
    }

    /// Issue 44.4: a job cancelled while its start was prepared (its status said queued, attempt
    /// 0) reported attempt 1 once cancelled, and the journal kept that attempt.
    @Test func aJobCancelledBeforeItReachedAWorkerReportsNoAttempt() throws {
        var broker = BrokerHarness.withJournal()
        broker.keepsRecord = true
        _ = broker.settle(broker.ready(worker1, capacity: 1))
        _ = broker.settle(broker.submitted(client, RequestID(high: 1, low: 1)).1)
        let (prepared, followed) = broker.submitted(client, RequestID(high: 1, low: 2))
        _ = broker.settle(followed)
        let status = RequestID(high: 2, low: 1)
        let before = try #require(
            reports(broker.ask(client, status, BrokerService.jobStatus, prepared), to: status).first)
        #expect(before.state == .queued && before.attempt == 0)
        let cancel = RequestID(high: 3, low: 1)
        let cancelled = broker.ask(client, cancel, BrokerService.jobCancel, prepared)
        let changes = cancelled.flatMap { action -> [JobChange] in
            switch action {
            case .journal(.write(let changes, _)), .journal(.writeWithNextCommit(let changes, _)): changes
            default: []
            }
        }
        #expect(changes.first == .released(id: prepared.bytes, attempt: 0), "on disk too, before the outcome")
        let answered = try #require(reports(broker.commit(cancelled), to: cancel).first)
        #expect(answered.state == .cancelled && answered.attempt == 0)
        let event = events(broker.recorded).first { $0.event == .jobCancelled }
        #expect(event?.task?.deliveries == 0)
    }

    /// A job the broker holds is reported from memory even when a journal read about it comes
    /// back with its record (asked before its submit was answered): the record shows a start
    /// written ahead with the submit as `running`, attempt 1, though it never reached a worker.
    @Test func aLookupOfAJobHeldMeanwhileIsAnsweredFromMemoryNotFromItsStartRecordedAhead() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.settle(broker.ready(worker1, capacity: 1))
        _ = broker.settle(broker.submitted(client, RequestID(high: 1, low: 1)).1)
        let asked = broker.request(
            client, RequestID(high: 1, low: 2), service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        guard case .journal(.write(let changes, .submitted(let id)))? = effects(asked).first,
            case .submitted(let record)? = changes.first
        else {
            Issue.record("\(asked)")
            return
        }
        #expect(record.state == .running && record.attempt == 1, "its start is written with it")
        let status = RequestID(high: 2, low: 1)
        #expect(journalLookups(broker.ask(client, status, BrokerService.jobStatus, id)) == 1, "not held yet")
        _ = broker.settle(asked)
        let caller = JobCaller(peer: client, requestID: status, attempt: 1)
        let answered = broker.journal(.lookedUp(id, caller, retry: false, .success(record)))
        let report = try #require(reports(answered, to: status).first)
        #expect(report.state == .queued && report.attempt == 0)
    }

    /// Issue 44.3: a job's attempt ran for its timeout plus the lease grace (5 s by default)
    /// before it was cancelled. It ends at its timeout; the grace is only how long its worker
    /// has to answer the cancel before it is told again.
    @Test func aJobsAttemptIsCancelledAndFailsAtItsTimeoutNotAfterTheLeaseGrace() throws {
        var broker = BrokerHarness.withJournal { $0.leaseGrace = .seconds(5) }
        _ = broker.settle(broker.ready(worker1, capacity: 1))
        let (id, followed) = broker.submitted(client, RequestID(high: 1, low: 1)) {
            $0.timeoutMilliseconds = 300
            $0.maxAttempts = 1
        }
        #expect(broker.settle(followed) == [id.requestID])
        let wait = RequestID(high: 2, low: 1)
        _ = broker.ask(client, wait, BrokerService.jobWait, id)
        let before = broker.advance(.milliseconds(299))
        #expect(before.allSatisfy { if case .sendToWorker(_, .cancel) = $0 { false } else { true } })
        #expect(journalWrites(before).isEmpty)
        let atTimeout = broker.advance(.milliseconds(1))
        #expect(
            atTimeout.contains { if case .sendToWorker(worker1, .cancel(_, id.requestID)) = $0 { true } else { false } }
        )
        #expect(journalWrites(atTimeout) == [.finished(id)])
        let report = try #require(reports(broker.commit(atTimeout), to: wait).first)
        #expect(report.state == .failed && report.outcomeStatus == .deadlineExceeded && report.attempt == 1)
        // The worker ignores the cancel: after the grace it is told again; its slot stays taken.
        var graceLater: [BrokerAction] = []
        for _ in 0..<5 {
            _ = broker.worker(worker1, .heartbeat)  // alive, it just does not answer the cancel
            graceLater += broker.advance(.seconds(1))
        }
        #expect(
            graceLater.contains {
                if case .sendToWorker(worker1, .cancel(_, id.requestID)) = $0 { true } else { false }
            })
        let (second, secondFollowed) = broker.submitted(client, RequestID(high: 1, low: 2))
        #expect(broker.settle(secondFollowed).isEmpty, "the slot is still taken")
        // Its late answer frees the slot, and is not the job's outcome.
        let late = broker.reply(worker1, client: client, id.requestID)
        #expect(broker.settle(late) == [second.requestID])
    }

    /// A timed-out attempt of a job that retries on timeouts is retried after its backoff,
    /// counted from the timeout (not from the timeout plus the grace).
    @Test func aTimedOutAttemptIsRetriedAfterItsBackoffFromTheTimeout() throws {
        var broker = BrokerHarness.withJournal { $0.leaseGrace = .seconds(5) }
        _ = broker.settle(broker.ready(worker1, capacity: 2))
        let (id, followed) = broker.submitted(client, RequestID(high: 1, low: 1)) {
            $0.timeoutMilliseconds = 300
            $0.initialBackoffMilliseconds = 100
        }
        #expect(broker.settle(followed) == [id.requestID])
        let atTimeout = broker.advance(.milliseconds(300))
        #expect(journalWrites(atTimeout) == [.rescheduled(id)])
        #expect(events(atTimeout).contains { $0.event == .jobRetrying })
        #expect(broker.settle(atTimeout).isEmpty)
        #expect(broker.settle(broker.advance(.milliseconds(100))) == [id.requestID], "the second attempt")
        #expect(broker.machine.jobBook.jobs[id]?.attempt == 2)
    }

    /// docs/jobs.md, "Options": with both a delay and a not-before, a job starts at the later
    /// of the two (the broker's wall clock at submit plus the delay, or the not-before).
    @Test func aJobWithADelayAndANotBeforeStartsAtTheLaterOfThem() throws {
        let wall: Int64 = 1_700_000_000_000
        for (delay, notBefore, expected) in [
            (UInt64(60_000), wall + 10_000, wall + 60_000), (60_000, wall + 120_000, wall + 120_000),
        ] {
            var broker = BrokerHarness.withJournal()
            let (id, _) = broker.submit(client, RequestID(high: 1, low: 1)) {
                $0.delayMilliseconds = delay
                $0.notBeforeMilliseconds = notBefore
            }
            #expect(try #require(broker.machine.jobBook.jobs[id]).notBefore == expected)
        }
    }

    /// A job whose worker was lost is queued again, in memory and on disk: a broker killed
    /// before it runs again finds it queued, not running, so its restart does not count one
    /// more attempt than were made (the jobs soak counts the attempts beyond one exactly).
    @Test func aLostWorkersJobIsRecordedQueuedAgainWithItsAttemptKept() throws {
        var broker = BrokerHarness.withJournal()
        let (id, submitted) = broker.submit(client, RequestID(high: 1, low: 1))
        let started = broker.commit(broker.ready(worker1) + submitted)
        #expect(dispatched(started).map(\.1) == [id.requestID])
        let lost = broker.worker(worker1, .disconnect)
        let requeue = lost.compactMap { action -> [JobChange]? in
            if case .journal(.write(let changes, .requeued(id))) = action { changes } else { nil }
        }
        let notBefore = try #require(broker.machine.jobBook.jobs[id]).notBefore
        #expect(requeue == [[.rescheduled(id: id.bytes, notBefore: notBefore)]])
        #expect(broker.commit(lost).isEmpty, "nothing waits for it")
        // The next worker gets it as its second attempt.
        let worker2 = PeerID([0, 0, 0, 2, 2])
        let again = broker.commit(broker.ready(worker2))
        #expect(dispatched(again).map(\.1) == [id.requestID])
        #expect(broker.machine.jobBook.jobs[id]?.attempt == 2)
    }
}

@Suite("Broker state machine: durable jobs under absurd input")
struct BrokerJobLimitTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    @Test func aNotBeforeCenturiesAheadStaysScheduledInsteadOfOverflowingToNow() {
        var broker = BrokerHarness.withJournal()
        let (id, _) = broker.submit(client, RequestID(high: 1, low: 1)) { $0.notBeforeMilliseconds = Int64.max / 2 }
        _ = broker.commit(broker.ready(worker1))
        let later = broker.advance(.seconds(2))
        #expect(
            dispatched(later).isEmpty
                && journalWrites(later).allSatisfy { if case .started = $0 { false } else { true } })
        let status = RequestID(high: 2, low: 1)
        #expect(
            reports(broker.ask(client, status, BrokerService.jobStatus, id), to: status).map(\.state) == [.scheduled])
    }

    @Test func beyondTheJobsItMayHoldASubmitIsRefusedOverloaded() {
        var broker = BrokerHarness.withJournal { $0.maxHeldJobs = 2 }
        _ = broker.submit(client, RequestID(high: 1, low: 1))
        _ = broker.submit(client, RequestID(high: 1, low: 2))
        let third = RequestID(high: 1, low: 3)
        let refused = broker.request(
            client, third, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: [7]).encode())
        guard case .sendToClient(_, .reply(let reply))? = refused.first else {
            Issue.record("\(refused)")
            return
        }
        #expect(reply.status == .overloaded)
        #expect(RemoteErrorBody(decoding: reply.body).message.contains("2 unfinished jobs"))
        #expect(journalWrites(refused).isEmpty)
    }

    @Test func aMalformedSubmissionIsAnsweredInvalidPayloadNamingTheField() {
        var broker = BrokerHarness.withJournal()
        let request = RequestID(high: 1, low: 1)
        let truncated = Array(JobSubmission(service: "sky.scan", body: []).encode().prefix(12))
        let answer = broker.request(client, request, service: BrokerService.jobSubmit, body: truncated)
        guard case .sendToClient(_, .reply(let reply))? = answer.first else {
            Issue.record("\(answer)")
            return
        }
        #expect(reply.status == .invalidPayload)
        #expect(RemoteErrorBody(decoding: reply.body).message.contains("not-before"))
        #expect(broker.machine.jobCount == 0)
    }
}
