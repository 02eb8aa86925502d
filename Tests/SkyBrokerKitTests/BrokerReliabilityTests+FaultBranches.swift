import Foundation
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The fault-handling branches of the broker's state machine that no other test reached
/// (found with `ops/sky test --coverage`), each driven on purpose.
extension BrokerReliabilityTests {
    /// A request's no-workers grace runs out after a worker of its service joined but is busy:
    /// it keeps waiting for that worker instead of being answered `noWorkers`.
    @Test func aGraceThatRunsOutAfterAWorkerJoinedLeavesTheRequestWaiting() {
        var broker = BrokerHarness()
        let older = RequestID(high: 1, low: 0)
        let newer = RequestID(high: 1, low: 1)
        _ = broker.request(clientA, older)
        _ = broker.request(clientA, newer)
        _ = broker.advance(.seconds(1))
        #expect(dispatched(broker.ready(worker1, capacity: 1)).map(\.1) == [older])
        let graceOver = broker.advance(.milliseconds(1500))
        #expect(replies(graceOver).isEmpty, "served now: it waits for the worker")
        #expect(broker.machine.counters.noWorkersAnswered == 0)
        #expect(broker.machine.queuedCount == 1)
        #expect(dispatched(broker.reply(worker1, client: clientA, older)).map(\.1) == [newer])
    }

    /// While the broker holds as many workers and deliveries as its delivery book allows (16 M
    /// slots; 4 here), requests wait although workers have credits, and a new worker is
    /// refused with the reason; a slot freed by a reply goes to the oldest waiting request.
    @Test func aFullDeliveryBookQueuesRequestsAndRefusesWorkers() {
        var broker = BrokerHarness()
        broker.machine.deliveries = DeliveryBook(limit: 4)
        _ = broker.ready(worker1, capacity: 10)
        let ids = (0..<4).map { RequestID(high: 7, low: UInt64($0)) }
        #expect(dispatched(broker.request(clientA, ids[0])).map(\.1) == [ids[0]])
        #expect(dispatched(broker.request(clientA, ids[1])).map(\.1) == [ids[1]])
        _ = broker.ready(worker2, capacity: 10)
        #expect(broker.machine.workerCount == 2, "the fourth slot is worker2's")
        #expect(dispatched(broker.request(clientA, ids[2])).isEmpty, "no slot left: it waits")
        #expect(dispatched(broker.request(clientA, ids[3])).isEmpty)
        #expect(broker.machine.queuedCount == 2 && broker.machine.inFlightCount == 2)
        let worker3 = PeerID([0, 0, 0, 1, 3])
        let refused = broker.ready(worker3, capacity: 10)
        #expect(broker.machine.workerCount == 2)
        let reasons = refused.compactMap { action -> String? in
            if case .sendToWorker(worker3, .refused(let reason)) = action { reason } else { nil }
        }
        #expect(reasons.count == 1 && reasons[0].contains("4 workers and deliveries at once"))
        #expect(dispatched(broker.reply(worker1, client: clientA, ids[0])).map(\.1) == [ids[2]])
        #expect(dispatched(broker.reply(worker1, client: clientA, ids[1])).map(\.1) == [ids[3]])
        #expect(broker.machine.queuedCount == 0 && broker.machine.inFlightCount == 2)
    }

    /// When the broker knows as many services as it allows (served, waiting, or answered this
    /// stats period), a request naming one more is answered `overloaded` at once, and counted;
    /// a task whose worker is lost always waits again (its service stays known); a service
    /// nobody serves, waits for or was answered in a period is forgotten at the stats pass, and
    /// its number serves another. (The default limit is 100,000 services; a limit of 3
    /// drives the same branches.)
    @Test func whenEveryServiceNumberIsTakenNewServicesAreOverloadedAndLostTasksStillWait() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.waitingServicesLimit = 3
        var broker = BrokerHarness(configuration)
        _ = broker.ready(worker1, capacity: 1, services: ["held"])
        let held = RequestID(high: 3, low: 0)
        let first = RequestID(high: 3, low: 1)
        #expect(dispatched(broker.request(clientA, held, service: "held")).map(\.1) == [held])
        _ = broker.request(clientA, first, service: "first", noWorkersGrace: .seconds(60))
        _ = broker.request(clientA, RequestID(high: 3, low: 2), service: "second", noWorkersGrace: .seconds(60))
        let refused = replies(broker.request(clientB, RequestID(high: 3, low: 3), service: "third"))
        #expect(refused.map(\.1.status) == [.overloaded])
        let refusal = RemoteErrorBody(decoding: refused.first?.1.body ?? []).message
        #expect(refusal.contains("the broker knows 3 services"), "\(refusal)")
        #expect(broker.machine.counters.rejectedOverloaded == 1)
        // The worker is lost: its task waits again, unanswered.
        var actions: [BrokerAction] = []
        broker.machine.workerUnreachable(worker1, now: broker.now, into: &actions)
        #expect(replies(actions).isEmpty)
        #expect(broker.machine.queuedCount == 3)
        // Another worker runs both (the older first) and leaves; once a stats pass is over,
        // "held" and "first" are forgotten and "third" has a number.
        #expect(dispatched(broker.ready(worker2, capacity: 2, services: ["held", "first"])).map(\.1) == [held, first])
        _ = broker.reply(worker2, client: clientA, held)
        _ = broker.reply(worker2, client: clientA, first)
        _ = broker.worker(worker2, .disconnect)
        #expect(
            replies(broker.request(clientB, RequestID(high: 3, low: 4), service: "third")).map(\.1.status) == [
                .overloaded
            ])
        _ = broker.advance(.seconds(1))  // the first tick starts the stats period
        _ = broker.advance(.seconds(1))
        #expect(broker.machine.services.count == 1, "only \"second\" still waits")
        #expect(replies(broker.request(clientB, RequestID(high: 3, low: 5), service: "third")).isEmpty)
        #expect(broker.machine.queuedCount == 2)
    }

    /// The client cancelled (and was answered), but the worker never answers the cancelled
    /// delivery: at deadline + grace the broker tells the worker CANCEL again and says so in
    /// its log, answers nobody a second time, and keeps the credit taken until the worker's
    /// REPLY, since the handler still runs (before, the credit came back at the lease, and the
    /// next request went to a worker with no free slot).
    @Test func aCancelledDeliveryThatNeverAnswersKeepsItsSlotPastItsLease() {
        var configuration = BrokerStateMachine.Configuration()
        configuration.leaseGrace = .seconds(1)
        var broker = BrokerHarness(configuration)
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(clientA, id, timeout: .seconds(1))
        let tag = broker.tag(id, at: worker1)
        #expect(replies(broker.cancel(clientA, id)).map(\.1.status) == [.cancelled])
        let other = RequestID(high: 2, low: 2)
        #expect(dispatched(broker.request(clientB, other)).isEmpty, "the hung delivery still holds the credit")
        let lease = broker.advance(.milliseconds(2100))
        #expect(lease.contains(.sendToWorker(worker1, .cancel(tag: tag, id))))
        #expect(replies(lease).isEmpty, "the client was answered once already")
        #expect(dispatched(lease).isEmpty, "the handler still holds the worker's only slot")
        #expect(logs(lease).contains { $0.contains("slot stays taken") })
        #expect(broker.machine.workers[worker1]?.held == 1)
        // The handler returns at last: its reply only frees the slot.
        let late = broker.reply(worker1, client: clientA, id)
        #expect(replies(late).isEmpty)
        #expect(dispatched(late).map(\.1) == [other])
        #expect(broker.machine.workers[worker1]?.cancelledKeys.isEmpty == true)
        #expect(broker.machine.counters.repliesAfterCancel == 1)
    }

    /// Every command from a peer that is not a registered worker is counted
    /// (`unknownWorkerMessages`) and answered DISCONNECT, as docs/protocol.md says, so that a
    /// worker the broker forgot registers again: a FEATURES was once dropped without a trace,
    /// and a DRAINING waited for an acknowledgement that never came. Only a DISCONNECT is not
    /// answered (the peer is leaving; an answer would only tell it to come back).
    @Test func everyCommandFromAnUnknownPeerIsCountedAndAllButAGoodbyeAnsweredDisconnect() {
        var broker = BrokerHarness()
        for command in [WorkerToBroker.features(["packed"]), .draining, .heartbeat] {
            #expect(effects(broker.worker(worker1, command)) == [.sendToWorker(worker1, .disconnect)], "\(command)")
        }
        #expect(effects(broker.worker(worker1, .disconnect)).isEmpty)
        #expect(broker.machine.workerCount == 0)
        #expect(broker.machine.counters.unknownWorkerMessages == 4)
        #expect(broker.machine.counters.malformedWorkerMessages == 0)
    }
}
