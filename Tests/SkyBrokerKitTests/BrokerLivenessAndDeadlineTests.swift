import Foundation
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The framed replies to request `id` among `actions`.
func replies(_ actions: [BrokerAction], to id: RequestID) -> [TaskReply] {
    actions.compactMap { action in
        guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == id else { return nil }
        return reply
    }
}

func replies(_ actions: [BrokerAction]) -> [(PeerID, TaskReply)] {
    actions.compactMap { if case .sendToClient(let peer, .reply(let reply)) = $0 { (peer, reply) } else { nil } }
}

/// The log lines among `actions`.
func logs(_ actions: [BrokerAction]) -> [String] {
    actions.compactMap { if case .log(_, let line, _) = $0 { line } else { nil } }
}

@Suite("Broker state machine: liveness and re-dispatch (time moved by hand)")
struct BrokerLivenessTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let worker2 = PeerID([0, 0, 0, 1, 2])
    let id = RequestID(high: 5, low: 1)

    @Test func aSilentWorkerExpiresAtExactlyLivenessTimesInterval() {
        var broker = BrokerHarness()  // 1 s × 3
        _ = broker.ready(worker1)
        #expect(events(broker.advance(.seconds(3) - .nanoseconds(1))).allSatisfy { $0.event != .workerDisconnected })
        #expect(broker.machine.workerCount == 1)
        let expired = events(broker.advance(.nanoseconds(1))).first { $0.event == .workerDisconnected }
        #expect(expired?.reason == .expired)
        #expect(broker.machine.workerCount == 0)
        #expect(broker.machine.counters.workersExpired == 1)
    }

    @Test func anyMessageFromAWorkerRefreshesIt() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.advance(.seconds(2))
        _ = broker.worker(worker1, .heartbeat)
        _ = broker.advance(.milliseconds(2999))
        #expect(broker.machine.workerCount == 1)
        _ = broker.request(client, id)
        _ = broker.reply(worker1, client: client, id)  // a reply counts as a sign of life too
        _ = broker.advance(.milliseconds(2999))
        #expect(broker.machine.workerCount == 1)
        _ = broker.advance(.milliseconds(1))
        #expect(broker.machine.workerCount == 0)
    }

    /// A call whose only worker died under its task, and that nobody else serves, hears
    /// `noWorkers` saying so: "check the service name" alone misled its caller.
    @Test func aCallWhoseOnlyWorkerDiedUnderItSaysSo() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.request(client, id, timeout: .seconds(30))
        _ = broker.worker(worker1, .disconnect)
        let answered = try #require(replies(broker.advance(.seconds(5)), to: id).first)
        #expect(answered.status == .noWorkers)
        let said = RemoteErrorBody(decoding: answered.body).message
        #expect(said.contains("it had been running on a worker that was lost (1 time)"), "\(said)")
    }

    /// A request that waited for a worker at first, ran on one that joined, and is back in the
    /// queue after that worker's loss hears `noWorkers` a grace after the loss: its first grace
    /// entry answered it 0.46 s after the loss (a third-party worker's test).
    @Test func theGraceOfARequestWhoseWorkerWasLostCountsFromTheLoss() throws {
        var broker = BrokerHarness()  // a grace of 2 s
        _ = broker.request(client, id, timeout: .seconds(30))
        _ = broker.advance(.milliseconds(100))
        #expect(dispatched(broker.ready(worker1)).map(\.1) == [id])
        _ = broker.advance(.milliseconds(1500))
        _ = broker.worker(worker1, .disconnect)  // at 1.6 s
        #expect(replies(broker.advance(.milliseconds(1900)), to: id).isEmpty, "not before the grace since the loss")
        let answered = try #require(replies(broker.advance(.milliseconds(200)), to: id).first)
        #expect(answered.status == .noWorkers)
    }

    /// A request that came after its service's last worker left has its own grace from its
    /// arrival: the loss's grace answered every waiting request, one that came 1.9 s after the
    /// loss 0.1 s after it arrived.
    @Test func aRequestThatCameAfterTheLastWorkerLeftKeepsItsOwnGrace() throws {
        var broker = BrokerHarness()  // a grace of 2 s
        let waiting = RequestID(high: 5, low: 2)
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, id, timeout: .seconds(30))  // runs
        _ = broker.request(client, waiting, timeout: .seconds(30))  // waits
        _ = broker.worker(worker1, .disconnect)  // at 0 s
        _ = broker.advance(.milliseconds(1900))
        let late = RequestID(high: 5, low: 3)
        _ = broker.request(client, late, timeout: .seconds(30))
        let atGrace = replies(broker.advance(.milliseconds(100)))
        #expect(Set(atGrace.map(\.1.requestID)) == [id, waiting], "the requests that waited at the loss")
        #expect(atGrace.allSatisfy { $0.1.status == .noWorkers })
        #expect(replies(broker.advance(.milliseconds(1899)), to: late).isEmpty, "not before its own grace")
        let answered = try #require(replies(broker.advance(.milliseconds(1)), to: late).first)
        #expect(answered.status == .noWorkers)
    }

    /// A request that asked for a longer grace than the broker's (a client that waits out a
    /// rolling restart) keeps it when its service's last worker leaves; one that asked for a
    /// shorter one is answered at its end, counted from the loss.
    @Test func aGraceTheRequestAskedForHoldsWhenTheLastWorkerLeaves() throws {
        var broker = BrokerHarness()  // a grace of 2 s
        let patient = RequestID(high: 5, low: 2)
        let hasty = RequestID(high: 5, low: 3)
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, id, timeout: .seconds(60))  // runs
        _ = broker.request(client, patient, timeout: .seconds(60), noWorkersGrace: .seconds(10))
        _ = broker.request(client, hasty, timeout: .seconds(60), noWorkersGrace: .milliseconds(500))
        _ = broker.advance(.seconds(1))
        _ = broker.worker(worker1, .disconnect)  // at 1 s
        #expect(replies(broker.advance(.milliseconds(499))).isEmpty)
        #expect(replies(broker.advance(.milliseconds(1))).map(\.1.requestID) == [hasty])
        #expect(replies(broker.advance(.milliseconds(1500))).map(\.1.requestID) == [id])
        #expect(replies(broker.advance(.milliseconds(7999)), to: patient).isEmpty, "not before its own grace")
        let answered = try #require(replies(broker.advance(.milliseconds(1)), to: patient).first)
        #expect(answered.status == .noWorkers)
    }

    /// Waiting requests whose grace has not ended when their service's last worker's grace
    /// does are still dispatched when a worker of it joins.
    @Test func aRequestKeptPastTheLossesGraceRunsWhenAWorkerJoins() {
        var broker = BrokerHarness()  // a grace of 2 s
        let patient = RequestID(high: 5, low: 2)
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, id, timeout: .seconds(60))
        _ = broker.request(client, patient, timeout: .seconds(60), noWorkersGrace: .seconds(10))
        _ = broker.worker(worker1, .disconnect)
        _ = broker.advance(.seconds(5))
        #expect(dispatched(broker.ready(worker2)).map(\.1) == [patient])
    }

    /// More requests whose grace goes on than a tick's batch, ahead of one whose grace is over:
    /// the broker does not take the same ones at every tick; it looks again when the first of
    /// their graces ends, and every request is answered once.
    @Test func patientRequestsBeyondATicksBatchAreAnsweredOnceEach() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.expiryBatch = 2
        var broker = BrokerHarness(configuration)  // a grace of 2 s
        let patient = (2...4).map { RequestID(high: 5, low: $0) }
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, id, timeout: .seconds(60), noWorkersGrace: .seconds(10))  // runs
        for request in patient {
            _ = broker.request(client, request, timeout: .seconds(60), noWorkersGrace: .seconds(10))
        }
        let plain = RequestID(high: 5, low: 9)
        _ = broker.request(client, plain, timeout: .seconds(60))
        _ = broker.worker(worker1, .disconnect)
        // One tick at a time (`advance` ticks on while there is a backlog: with the same
        // requests taken at every tick, for ever).
        var answered: [RequestID: Int] = [:]
        func count(_ actions: [BrokerAction]) {
            for (_, reply) in replies(actions) { answered[reply.requestID, default: 0] += 1 }
        }
        count(broker.tickOnce(after: .seconds(2)))  // the grace's pass: two requests whose grace goes on
        count(broker.tickOnce(after: .zero))  // what the backlog asks for next
        #expect(!broker.machine.hasExpiryBacklog, "the same requests taken at every tick")
        for _ in 0..<200 { count(broker.tickOnce(after: .milliseconds(50))) }
        #expect(answered == Dictionary(uniqueKeysWithValues: ([id, plain] + patient).map { ($0, 1) }))
    }

    @Test func theBrokerHeartbeatsEveryWorkerEachInterval() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.ready(worker2)
        let first = broker.advance(.milliseconds(100))
        #expect(effects(first).filter { if case .sendToWorker(_, .heartbeat) = $0 { true } else { false } }.count == 2)
        #expect(effects(broker.advance(.milliseconds(500))).isEmpty)
        let next = broker.advance(.milliseconds(500))
        #expect(next.contains(.sendToWorker(worker1, .heartbeat)))
        #expect(next.contains(.sendToWorker(worker2, .heartbeat)))
    }

    @Test func tasksOfAnExpiredWorkerRunElsewhereAndItsLateReplyIsDropped() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.request(client, id)
        _ = broker.ready(worker2)
        // worker2 keeps heartbeating, worker1 goes silent.
        _ = broker.advance(.seconds(2))
        _ = broker.worker(worker2, .heartbeat)
        let actions = broker.advance(.seconds(1))
        #expect(dispatched(actions).map(\.0) == [worker2])
        let redispatched = events(actions).first { $0.event == .taskRedispatched }
        #expect(redispatched?.task?.requestID == id.description)
        #expect(redispatched?.task?.deliveries == 1)
        #expect(events(actions).first { $0.event == .workerDisconnected }?.tasksHeld == 1)
        #expect(broker.machine.counters.requeued == 1)

        // worker1 wakes up and answers: dropped, counted, told to register again.
        let late = broker.reply(worker1, client: client, id)
        #expect(effects(late) == [.sendToWorker(worker1, .disconnect)])
        #expect(broker.machine.counters.staleReplies == 1)
        // worker2's answer is the one the client gets, once.
        let answer = broker.reply(worker2, client: client, id)
        #expect(replies(answer).count == 1)
        #expect(replies(broker.reply(worker2, client: client, id)).isEmpty)
        #expect(broker.machine.counters.staleReplies == 2)
    }

    @Test func aDrainingWorkerIsAcknowledgedAndGetsNoNewTasks() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        _ = broker.request(client, id)
        let actions = broker.worker(worker1, .draining)
        #expect(effects(actions).first == .sendToWorker(worker1, .drainingAcknowledged))
        #expect(events(actions).first?.event == .workerDraining)
        #expect(events(actions).first?.tasksHeld == 1)
        // A free credit, but draining: the next request waits for another worker.
        #expect(dispatched(broker.request(client, RequestID(high: 5, low: 2))).isEmpty)
        // The task it holds still completes normally.
        #expect(replies(broker.reply(worker1, client: client, id)).count == 1)
        #expect(dispatched(broker.ready(worker2)).map(\.0) == [worker2])
    }

    /// protocol.md: the broker "answers with the same command". A second DRAINING went
    /// unanswered (a worker that missed the first answer waited on it); it is acknowledged
    /// again, and published once.
    @Test func aRepeatedDrainingIsAcknowledgedAgainAndPublishedOnce() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        _ = broker.worker(worker1, .draining)
        let again = broker.worker(worker1, .draining)
        #expect(effects(again) == [.sendToWorker(worker1, .drainingAcknowledged)])
        #expect(events(again).isEmpty)
    }

    @Test func afterTheMaximumDeliveriesTheClientGetsWorkerLost() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.maxDeliveries = 2
        var broker = BrokerHarness(configuration)
        _ = broker.request(client, id)
        _ = broker.ready(worker1)
        var actions: [BrokerAction] = []
        broker.machine.workerUnreachable(worker1, now: broker.now, into: &actions)
        #expect(broker.machine.queuedCount == 1)
        _ = broker.ready(worker2)
        actions = broker.worker(worker2, .disconnect)
        let lost = replies(actions)
        #expect(lost.count == 1)
        #expect(lost.first?.0 == client)
        #expect(lost.first?.1.status == .workerLost)
        #expect(events(actions).first { $0.event == .taskFailed }?.task?.status == "workerLost")
        #expect(broker.machine.queuedCount == 0)
        #expect(broker.machine.counters.failedWorkerLost == 1)
    }
}

@Suite("Broker state machine: deadlines, leases, backpressure, cancel, shutdown")
struct BrokerDeadlineTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID([0, 0, 0, 1, 1])
    let id1 = RequestID(high: 6, low: 1)
    let id2 = RequestID(high: 6, low: 2)
    let id3 = RequestID(high: 6, low: 3)

    @Test func aRequestStillWaitingAtItsDeadlineIsAnsweredDeadlineExceeded() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1)
        _ = broker.request(client, id1)
        _ = broker.request(client, id2, timeout: .seconds(2))
        #expect(replies(broker.advance(.milliseconds(1999))).isEmpty)
        _ = broker.worker(worker, .heartbeat)
        let expired = replies(broker.advance(.milliseconds(1)))
        #expect(expired.map(\.1.requestID) == [id2])
        #expect(expired.first?.1.status == .deadlineExceeded)
        // It is not dispatched when the worker frees up.
        #expect(dispatched(broker.reply(worker, client: client, id1)).isEmpty)
        #expect(broker.machine.counters.deadlinesExceeded == 1)
    }

    @Test func aRequestForAServiceNobodyServesFailsWithNoWorkersAtItsDeadline() {
        var broker = BrokerHarness()
        _ = broker.request(client, id1, service: "nobody", timeout: .seconds(1))
        let actions = broker.advance(.seconds(1))
        #expect(replies(actions).first?.1.status == .noWorkers)
        #expect(RemoteErrorBody(decoding: replies(actions).first!.1.body).message.contains("nobody"))
    }

    @Test func aTaskRunningPastDeadlinePlusGraceIsTakenFromItsWorker() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.leaseGrace = .seconds(5)
        var broker = BrokerHarness(configuration)
        _ = broker.ready(worker, capacity: 1)
        _ = broker.request(client, id1, timeout: .seconds(1))
        _ = broker.request(client, id2)
        _ = broker.advance(.milliseconds(2500))
        _ = broker.worker(worker, .heartbeat)
        _ = broker.advance(.milliseconds(2500))
        _ = broker.worker(worker, .heartbeat)
        // The deadline (1 s) has long passed, but the lease runs to deadline + grace = 6 s.
        #expect(replies(broker.advance(.milliseconds(999))).isEmpty)
        let actions = broker.advance(.milliseconds(1))
        #expect(actions.contains(.sendToWorker(worker, .cancel(tag: broker.tag(id1, at: worker), id1))))
        #expect(replies(actions).map(\.1.status) == [.deadlineExceeded])
        // The handler may still run: its slot stays taken until the worker answers.
        #expect(dispatched(actions).isEmpty)
        #expect(broker.machine.counters.deadlinesExceeded == 1)
        // Its late reply goes to nobody and frees the slot for the waiting request.
        let late = broker.reply(worker, client: client, id1)
        #expect(replies(late).isEmpty)
        #expect(dispatched(late).map(\.1) == [id2])
        #expect(broker.machine.counters.repliesAfterCancel == 1)
        #expect(broker.machine.counters.staleReplies == 0)
    }

    @Test func beyondTheQueueLimitRequestsAreRefusedAsOverloaded() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.queueLimit = 2
        configuration.clientQueueShare = 1
        var broker = BrokerHarness(configuration)
        _ = broker.request(client, id1)
        _ = broker.request(client, id2)
        let refused = broker.request(client, id3)
        #expect(replies(refused).first?.1.status == .overloaded)
        #expect(events(refused).first?.event == .taskFailed)
        #expect(broker.machine.queuedCount == 2)
        #expect(broker.machine.counters.rejectedOverloaded == 1)
        // A request that can go straight to a worker is never refused.
        _ = broker.ready(worker, capacity: 3)
        #expect(dispatched(broker.request(client, RequestID(high: 6, low: 4))).count == 1)
    }

    @Test func cancellingAWaitingRequestAnswersItAndItNeverRuns() {
        var broker = BrokerHarness()
        _ = broker.request(client, id1)
        let actions = broker.cancel(client, id1)
        #expect(replies(actions).map(\.1.status) == [.cancelled])
        #expect(broker.machine.queuedCount == 0)
        #expect(dispatched(broker.ready(worker)).isEmpty)
        // Cancelling again, or something unknown, does nothing.
        #expect(effects(broker.cancel(client, id1)).isEmpty)
    }

    @Test func cancellingARunningTaskTellsItsWorkerAndTheLateReplyOnlyReturnsTheCredit() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1)
        _ = broker.request(client, id1)
        _ = broker.request(client, id2)
        let actions = broker.cancel(client, id1)
        #expect(actions.contains(.sendToWorker(worker, .cancel(tag: broker.tag(id1, at: worker), id1))))
        #expect(replies(actions).map(\.1.status) == [.cancelled])
        // The credit stays taken until the worker answers (its handler may still be running).
        #expect(dispatched(actions).isEmpty)
        let late = broker.reply(worker, client: client, id1, status: .cancelled)
        #expect(replies(late).isEmpty)
        #expect(dispatched(late).map(\.1) == [id2])
        #expect(broker.machine.counters.cancelled == 1)
    }

    @Test func aRepeatedRequestIDWhileTheFirstIsPendingIsIgnored() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 2)
        #expect(dispatched(broker.request(client, id1)).count == 1)
        #expect(effects(broker.request(client, id1)).isEmpty)
        #expect(broker.machine.counters.duplicateRequests == 1)
        #expect(replies(broker.reply(worker, client: client, id1)).count == 1)
        // Once answered, the same id is a new request again (a retry after a lost reply).
        #expect(dispatched(broker.request(client, id1)).count == 1)
    }

    @Test func statsArePublishedEveryInterval() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 4)
        _ = broker.advance(.milliseconds(10))  // starts the stats clock
        for low in 1...3 {
            let id = RequestID(high: 7, low: UInt64(low))
            _ = broker.request(client, id)
            _ = broker.reply(worker, client: client, id)
        }
        _ = broker.request(client, id1)
        var stats = events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats
        // Answered at once (no time passed): the first bucket, 1 µs.
        #expect(
            stats?.services
                == [
                    "sky.scan": ServiceStats(
                        queued: 0, queuedBytes: 0, completed: 3, failed: 0, completedPerSecond: 3,
                        p50Milliseconds: 0.001,
                        p99Milliseconds: 0.001)
                ])
        stats?.services = nil
        #expect(stats?.counters?.requestsAccepted == 4 && stats?.counters?.repliesSent == 3)
        stats?.counters = nil
        #expect(
            stats
                == BrokerStats(
                    workers: 1, capacity: 4, queued: 0, inFlight: 1, completed: 3, completedPerSecond: 3,
                    queuedBytes: 0,
                    longestIterationMilliseconds: 0, failed: 0))
    }

    @Test func taskEventsOnlyWhenEnabled() {
        var quiet = BrokerHarness()
        _ = quiet.ready(worker)
        #expect(events(quiet.request(client, id1)).isEmpty)
        var configuration = BrokerStateMachine.Configuration()
        configuration.taskEvents = true
        var loud = BrokerHarness(configuration)
        _ = loud.ready(worker)
        #expect(events(loud.request(client, id1)).map(\.event) == [.taskDispatched])
        #expect(events(loud.reply(worker, client: client, id1)).map(\.event) == [.taskCompleted])
        // Enabled but unwatched, or watched on another topic: not built.
        loud.machine.eventSubscription([], subscribed: false)
        #expect(events(loud.request(client, id2)).isEmpty)
        loud.machine.eventSubscription(Array("worker.".utf8), subscribed: true)
        #expect(events(loud.reply(worker, client: client, id2)).isEmpty)
        loud.machine.eventSubscription(Array("task.comp".utf8), subscribed: true)
        #expect(events(loud.request(client, id3)).isEmpty)
        #expect(events(loud.reply(worker, client: client, id3)).map(\.event) == [.taskCompleted])
    }

    @Test func shutdownAnswersEverythingTellsWorkersAndRefusesNewWork() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1)
        _ = broker.request(client, id1)
        _ = broker.request(client, id2)
        var actions: [BrokerAction] = []
        broker.machine.shutdown(now: broker.now, into: &actions)
        #expect(Set(replies(actions).map(\.1.requestID)) == [id1, id2])
        #expect(replies(actions).allSatisfy { $0.1.status == .brokerShuttingDown })
        #expect(actions.contains(.sendToWorker(worker, .disconnect)))
        #expect(replies(broker.request(client, id3)).first?.1.status == .brokerShuttingDown)
        #expect(effects(broker.ready(PeerID([9]))) == [.sendToWorker(PeerID([9]), .disconnect)])
    }

    @Test func theSnapshotShowsQueuesInFlightAndTheLastEventSeq() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1)
        _ = broker.request(client, id1)
        _ = broker.request(client, id2)
        let snapshot = broker.machine.snapshot(now: broker.now)
        #expect(snapshot.seq == 1)
        #expect(snapshot.inFlight == 1)
        #expect(snapshot.queued == ["sky.scan": 1])
        #expect(snapshot.workers.first?.inFlight == 1)
    }
}
