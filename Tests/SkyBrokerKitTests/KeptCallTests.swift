import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Calls that outlive their caller (``RequestHeader/keepIfAbandoned``): the broker records the
/// call as a job under its request id when its caller leaves it, and the job runs once.
@Suite("Broker state machine: calls kept when their caller leaves")
struct KeptCallTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let call = RequestID(high: 0x0190_0000_0000_0001, low: 7)

    /// The record a kept call's first journal write makes, if it made one.
    func keptRecord(_ actions: [BrokerAction]) -> JobRecord? {
        for action in actions {
            if case .journal(.write(let changes, .submitted(let id))) = action, id == JobID(call),
                case .submitted(let record)? = changes.first
            {
                return record
            }
        }
        return nil
    }

    @Test func aRunningCallItsClientLeavesRunsOnAsAJobWhoseOutcomeIsTheWorkersReply() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        #expect(dispatched(broker.request(client, call, timeout: .seconds(5), keep: true)).map(\.1) == [call])
        _ = broker.advance(.seconds(2))
        let left = broker.cancel(client, call)
        let record = try #require(keptRecord(left), "\(left)")
        #expect(record.state == .running && record.attempt == 1 && record.service == "sky.scan" && record.body == [1])
        // It was submitted when it arrived and started when its worker took it, not when it was
        // kept.
        #expect(record.submittedAt == 1_700_000_000_000 - 2_000)
        #expect(record.startedAt == 1_700_000_000_000 - 2_000 && record.endedAt == 0)
        #expect(replies(left, to: call).isEmpty, "answered once the job is on disk")
        #expect(!left.contains { if case .sendToWorker(_, .cancel) = $0 { true } else { false } }, "the worker goes on")
        let committed = broker.commit(left)
        #expect(replies(committed, to: call).map(\.status) == [.keptAsJob])
        #expect(replies(committed, to: call).map(\.attempt) == [0], "it answers the CANCEL")

        let replied = broker.reply(worker1, client: client, call)
        #expect(replies(replied, to: call).isEmpty, "the reply goes to the job, not the client")
        #expect(journalWrites(replied) == [.finished(JobID(call))])
        let times = replied.flatMap { action -> [[Int64]] in
            let changes: [JobChange]
            switch action {
            case .journal(.write(let written, _)), .journal(.writeWithNextCommit(let written, _)): changes = written
            default: return []
            }
            return changes.compactMap {
                guard case .finished(_, _, _, _, let startedAt, let endedAt, _) = $0 else { return nil }
                return [startedAt, endedAt]
            }
        }
        #expect(times == [[1_700_000_000_000 - 2_000, 1_700_000_000_000]], "\(replied)")
        let ended = broker.commit(replied)
        #expect(events(ended).map(\.event) == [.jobSucceeded])
        // Not held any more: a status is read from the journal.
        #expect(
            journalLookups(broker.ask(client, RequestID(high: 9, low: 9), BrokerService.jobStatus, JobID(call))) == 1)
        #expect(broker.machine.jobCount == 0)
        #expect(broker.machine.inFlightCount == 0)
    }

    /// Another process asks about the job a kept call may become while the call is in flight:
    /// a status says where the call stands (not "unknown"), and a wait is held until the call
    /// ends (the waiter gets its outcome) or is kept (the waiter waits on for the job).
    @Test func theJobAKeptCallMayBecomeIsAnsweredForWhileTheCallIsInFlight() throws {
        var broker = BrokerHarness.withJournal()
        let reader = PeerID([0, 0, 0, 0, 2])
        let (status, wait, later) = (
            RequestID(high: 9, low: 1), RequestID(high: 9, low: 2), RequestID(high: 9, low: 3)
        )
        _ = broker.request(client, call, timeout: .seconds(60), noWorkersGrace: .seconds(10), keep: true)
        #expect(
            reports(broker.ask(reader, status, BrokerService.jobStatus, JobID(call)), to: status).map(\.state) == [
                .queued
            ])
        _ = broker.ready(worker1)
        let running = reports(broker.ask(reader, status, BrokerService.jobStatus, JobID(call)), to: status)
        #expect(running.map(\.state) == [.running] && running.first?.service == "sky.scan")
        let asked = broker.ask(reader, wait, BrokerService.jobWait, JobID(call))
        #expect(reports(asked, to: wait).isEmpty && journalLookups(asked) == 0, "held, not looked up")
        // Its hold runs out: told where the call stands, not "unknown".
        var passed: [BrokerAction] = []
        for _ in 0..<21 {
            passed += broker.worker(worker1, .heartbeat)
            passed += broker.advance(.seconds(1))
        }
        #expect(reports(passed, to: wait).map(\.state) == [.running])
        // Sent three times while it waits: held, and answered, once.
        let duplicates = broker.machine.counters.duplicateRequests
        for _ in 0..<3 { _ = broker.ask(reader, later, BrokerService.jobWait, JobID(call)) }
        #expect(broker.machine.counters.duplicateRequests == duplicates + 2)
        let replied = broker.reply(worker1, client: client, call, body: [4, 2])
        #expect(replies(replied, to: call).map(\.status) == [.ok], "its caller gets the result")
        let heard = reports(replied, to: later)
        #expect(heard.map(\.state) == [.succeeded] && heard.first?.outcome == [4, 2], "and so does the waiter")
        // The call ended as a call: its id names nothing now.
        #expect(journalLookups(broker.ask(reader, status, BrokerService.jobStatus, JobID(call))) == 1)
        #expect(broker.machine.keptCalls.isEmpty)

        // A waiter on a call that is kept waits on for the job, and hears its outcome.
        let second = RequestID(high: 0x0190_0000_0000_0002, low: 8)
        _ = broker.request(client, second, timeout: .seconds(5), keep: true)
        let held = broker.ask(reader, wait, BrokerService.jobWait, JobID(second))
        #expect(reports(held, to: wait).isEmpty)
        _ = broker.commit(broker.cancel(client, second))
        let ended = broker.commit(broker.reply(worker1, client: client, second, body: [7]))
        let outcome = reports(ended, to: wait)
        #expect(outcome.map(\.state) == [.succeeded] && outcome.first?.outcome == [7], "\(ended)")
    }

    @Test func aRunningKeptCallIsKeptAtItsDeadlineWithoutTheLeaseGrace() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        _ = broker.request(client, call, timeout: .seconds(1), keep: true)
        #expect(keptRecord(broker.advance(.milliseconds(900))) == nil)
        let due = broker.advance(.milliseconds(200))
        let record = try #require(keptRecord(due), "\(due)")
        #expect(record.state == .running)
        #expect(!due.contains { if case .sendToWorker(_, .cancel) = $0 { true } else { false } })
        let committed = broker.commit(due)
        #expect(replies(committed, to: call).map(\.status) == [.keptAsJob])
        #expect(replies(committed, to: call).map(\.attempt) == [1])
        // Past the lease grace (5 s), still running as the job: nobody cancels it.
        var later: [BrokerAction] = []
        for _ in 0..<8 {
            later += broker.worker(worker1, .heartbeat)
            later += broker.advance(.seconds(1))
        }
        #expect(!later.contains { if case .sendToWorker(_, .cancel) = $0 { true } else { false } }, "\(later)")
        #expect(journalWrites(broker.reply(worker1, client: client, call)) == [.finished(JobID(call))])
    }

    @Test func aWaitingKeptCallBecomesAQueuedJobAtItsDeadlineAndRunsWhenAWorkerComes() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.request(client, call, timeout: .seconds(1), noWorkersGrace: .seconds(10), keep: true)
        let due = broker.advance(.milliseconds(1100))
        let record = try #require(keptRecord(due), "\(due)")
        #expect(record.state == .queued && record.attempt == 0)
        #expect(record.submittedAt == 1_700_000_000_000 - 1_100 && record.startedAt == 0, "submitted as it arrived")
        let committed = broker.commit(due)
        #expect(replies(committed, to: call).map(\.status) == [.keptAsJob])
        #expect(broker.machine.queuedCount == 0, "no longer a waiting call")
        #expect(broker.settle(broker.ready(worker1)) == [call], "it runs as the job, under its id")
    }

    @Test func aReplyThatFindsItsClientGoneIsRecordedAsTheJobsOutcome() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        _ = broker.request(client, call, timeout: .seconds(5), keep: true)
        for _ in 0..<3 {
            _ = broker.worker(worker1, .heartbeat)
            _ = broker.advance(.seconds(1))
        }
        let replied = broker.reply(worker1, client: client, call, body: [4, 2])
        let sent = try #require(replies(replied, to: call).first)
        _ = broker.advance(.seconds(1))
        var actions: [BrokerAction] = []
        broker.machine.clientUnreachable(
            client, frames: BrokerToClient.reply(sent).frames(), now: broker.now, into: &actions)
        let record = try #require(keptRecord(actions), "\(actions)")
        #expect(record.state == .succeeded && record.outcome == [0, 4, 2] && record.attempt == 1)
        // Submitted when it arrived, started when its worker took it (at once), ended when its
        // reply was sent.
        #expect(record.submittedAt == 1_700_000_000_000 - 4_000, "\(record.submittedAt)")
        #expect(record.startedAt == 1_700_000_000_000 - 4_000 && record.endedAt == 1_700_000_000_000 - 1_000)
        #expect(record.expiresAt > 1_700_000_000_000)
        #expect(events(broker.commit(actions)).map(\.event) == [.jobSubmitted, .jobSucceeded])

        // A call that did not ask to be kept is only counted.
        let other = RequestID(high: 5, low: 5)
        _ = broker.request(client, other, timeout: .seconds(5))
        let lost = try #require(replies(broker.reply(worker1, client: client, other), to: other).first)
        var more: [BrokerAction] = []
        broker.machine.clientUnreachable(
            client, frames: BrokerToClient.reply(lost).frames(), now: broker.now, into: &more)
        #expect(journalWrites(more).isEmpty)
    }

    @Test func aKeptCallWhoseIdIsAnotherJobsIsCancelledAndSaysWhy() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1)
        _ = broker.request(client, call, timeout: .seconds(5), keep: true)
        let left = broker.cancel(client, call)
        let record = try #require(keptRecord(left))
        var taken = record
        taken.service = "someone.else"
        let answered = broker.journal(
            .written(.submitted(JobID(call)), .success(JournalReceipt(duplicates: [record.id: taken]))))
        #expect(replies(answered, to: call).map(\.status) == [.cancelled])
        #expect(answered.contains { if case .sendToWorker(worker1, .cancel) = $0 { true } else { false } })
        // The worker's late reply is dropped: the other job's outcome is not touched.
        #expect(journalWrites(broker.reply(worker1, client: client, call)).isEmpty)
    }

    /// A kept call whose id names a job already, or another client's kept call in flight, is
    /// refused as it arrives (type `idInUse`): nobody's call may take over or answer for the
    /// work another's id names.
    @Test func aKeptCallWhoseIdIsInUseIsRefusedAsItArrives() throws {
        var broker = BrokerHarness.withJournal()
        let (job, _) = broker.submit(client, RequestID(high: 3, low: 3), service: "other")
        _ = broker.ready(worker1, capacity: 4)
        let refused = try #require(
            replies(broker.request(client, job.requestID, timeout: .seconds(5), keep: true), to: job.requestID).first)
        #expect(refused.status == .invalidPayload)
        #expect(RemoteErrorBody(decoding: refused.body).type == RemoteErrorBody.idInUseType)
        #expect(broker.machine.inFlightCount == 0, "not run")

        let other = PeerID([0, 0, 0, 0, 9])
        #expect(dispatched(broker.request(client, call, timeout: .seconds(5), keep: true)).count == 1)
        let taken = try #require(replies(broker.request(other, call, timeout: .seconds(5), keep: true), to: call).first)
        #expect(RemoteErrorBody(decoding: taken.body).type == RemoteErrorBody.idInUseType)
        #expect(broker.machine.inFlightCount == 1, "the first keeps it")
        // The same id as a plain call is another client's business.
        #expect(dispatched(broker.request(other, call, timeout: .seconds(5))).count == 1)
    }

    /// A call that cannot be kept when its caller leaves (here the broker holds as many jobs as
    /// it may) ends as calls end, and its answer says why: at a CANCEL, and at its deadline
    /// (without the lease grace, and without the warning about a handler that ignores
    /// cancellation).
    @Test func aCallThatCannotBeKeptEndsSayingWhy() throws {
        var broker = BrokerHarness.withJournal { $0.maxHeldJobs = 0 }
        _ = broker.ready(worker1)
        _ = broker.request(client, call, timeout: .seconds(5), keep: true)
        let cancelled = try #require(replies(broker.cancel(client, call), to: call).first)
        #expect(cancelled.status == .cancelled)
        #expect(
            RemoteErrorBody(decoding: cancelled.body).message.contains(
                "could not be kept as a job (the broker holds as many unfinished jobs as it may)"))

        _ = broker.reply(worker1, client: client, call)
        _ = broker.request(client, call, timeout: .seconds(1), keep: true)
        let due = broker.advance(.milliseconds(1100))
        let expired = try #require(replies(due, to: call).first)
        #expect(expired.status == .deadlineExceeded)
        #expect(RemoteErrorBody(decoding: expired.body).message.contains("could not be kept as a job"))
        #expect(due.contains { if case .sendToWorker(_, .cancel) = $0 { true } else { false } })
        #expect(
            !due.contains {
                if case .log(.warning, let line, _) = $0 { line.contains("ignore cancellation") } else { false }
            })
    }

    /// The replies remembered in case their client is gone are bounded in count, bytes and time.
    @Test func rememberedRepliesAreBounded() {
        var replies = KeptReplies()
        let peer = PeerID([1])
        for index in 0..<5000 {
            replies.remember(
                KeptReplies.Entry(
                    peer: peer,
                    request: TaskRequest(requestID: RequestID(high: 1, low: UInt64(index)), service: "s", body: [1]),
                    arrivedAt: 0, startedAt: 0, at: Int64(index)))
        }
        #expect(replies.take(peer: peer, requestID: RequestID(high: 1, low: 0)) == nil, "the oldest went")
        #expect(replies.take(peer: peer, requestID: RequestID(high: 1, low: 4999)) != nil)
        let big = [UInt8](repeating: 7, count: 40 << 20)
        for index in 0..<2 {
            replies.remember(
                KeptReplies.Entry(
                    peer: peer,
                    request: TaskRequest(requestID: RequestID(high: 2, low: UInt64(index)), service: "s", body: big),
                    arrivedAt: 0, startedAt: 0, at: 6000))
        }
        #expect(replies.take(peer: peer, requestID: RequestID(high: 2, low: 0)) == nil, "over 64 MiB: the older went")
        #expect(replies.take(peer: peer, requestID: RequestID(high: 2, low: 1)) != nil)
        replies.forget(before: 7000)
        #expect(replies.isEmpty)
    }

    @Test func aBrokerWithoutAJournalRefusesAKeptCallAtOnce() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        let asked = broker.request(client, call, timeout: .seconds(5), keep: true)
        #expect(replies(asked, to: call).map(\.status) == [.journalUnavailable])
        #expect(dispatched(asked).isEmpty)
    }

    @Test func theFlagTravelsInATwentyByteHeaderAndOnlyWhenSet() throws {
        let kept = ClientToBroker.request(
            TaskRequest(
                requestID: call, service: "s", header: RequestHeader(timeoutMilliseconds: 5, keepIfAbandoned: true),
                body: [1]))
        #expect(kept.encode()[4].count == RequestHeader.flaggedByteCount)
        #expect(try ClientToBroker.decode(kept.encode()) == kept)
        let plain = ClientToBroker.request(TaskRequest(requestID: call, service: "s", body: [1]))
        #expect(plain.encode()[4].count == RequestHeader.byteCount)
    }
}
