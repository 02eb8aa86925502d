import Foundation
import SkyWire
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Broker state machine: routing")
struct BrokerRoutingTests {
    let clientA = PeerID([0, 0, 0, 0, 1])
    let clientB = PeerID([0, 0, 0, 0, 2])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let worker2 = PeerID([0, 0, 0, 1, 2])
    let id1 = RequestID(high: 0, low: 1)
    let id2 = RequestID(high: 0, low: 2)
    let id3 = RequestID(high: 0, low: 3)

    /// Every action is copied into the machine's list and out of it: one rare large case (an
    /// event, 488 bytes inline) made each of them that large, 770 instructions a task in copies.
    @Test func anActionIsNoLargerThanASendToAWorker() {
        let send = MemoryLayout<PeerID>.stride + MemoryLayout<BrokerToWorker>.size
        #expect(MemoryLayout<BrokerAction>.size <= send, "\(MemoryLayout<BrokerAction>.size) bytes")
    }

    @Test func aRequestWithoutWorkersWaitsAndGoesToTheFirstWorkerThatJoins() {
        var broker = BrokerHarness()
        #expect(effects(broker.request(clientA, id1)).isEmpty)
        #expect(broker.machine.queuedCount == 1)

        let actions = broker.ready(worker1)
        let joined = events(actions)
        #expect(joined.map(\.event) == [.workerConnected])
        #expect(joined.first?.worker?.name == "w-\(worker1)")
        #expect(
            effects(actions).last
                == .sendToWorker(
                    worker1,
                    .request(
                        tag: broker.tag(id1, at: worker1), TaskRequest(requestID: id1, service: "sky.scan", body: [1])))
        )
        #expect(broker.machine.queuedCount == 0)
        #expect(broker.machine.inFlightCount == 1)
    }

    @Test func theReplyGoesBackToTheClientThatAsked() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.request(clientB, id1)
        let actions = broker.reply(worker1, client: clientB, id1)
        #expect(
            effects(actions) == [.sendToClient(clientB, .reply(TaskReply(requestID: id1, status: .ok, body: [42])))])
        #expect(broker.machine.counters.repliesSent == 1)
        #expect(broker.machine.inFlightCount == 0)
    }

    @Test func aWorkerNeverHoldsMoreThanItsCapacity() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        #expect(dispatched(broker.request(clientA, id1)).count == 1)
        #expect(dispatched(broker.request(clientA, id2)).count == 1)
        #expect(dispatched(broker.request(clientA, id3)).isEmpty)
        #expect(broker.machine.queuedCount == 1)
        // A reply frees a credit, and the waiting request takes it at once.
        let actions = broker.reply(worker1, client: clientA, id1)
        #expect(dispatched(actions).map(\.1) == [id3])
        #expect(broker.machine.inFlightCount == 2)
    }

    @Test func theLeastLoadedWorkerGetsTheNextTask() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        _ = broker.ready(worker2, capacity: 4)
        var targets: [PeerID] = []
        for low in 1...6 {
            targets += dispatched(broker.request(clientA, RequestID(high: 9, low: UInt64(low)))).map(\.0)
        }
        // Load is outstanding ÷ capacity; equal loads go to the one given work longest ago.
        #expect(targets == [worker1, worker2, worker2, worker1, worker2, worker2])
        #expect(dispatched(broker.request(clientA, RequestID(high: 9, low: 7))).isEmpty)
    }

    @Test func queuedRequestsRunInArrivalOrder() {
        var broker = BrokerHarness()
        let ids = (1...5).map { RequestID(high: 1, low: UInt64($0)) }
        for id in ids { _ = broker.request(clientA, id) }
        _ = broker.ready(worker1, capacity: 1)
        var order: [RequestID] = [ids[0]]
        for _ in 1..<ids.count {
            order += dispatched(broker.reply(worker1, client: clientA, order.last!)).map(\.1)
        }
        #expect(order == ids)
    }

    /// Four bands (urgent, above normal, normal, below normal), each in arrival order: what the
    /// client's `ScanOptions.priority` asks for.
    @Test func waitingRequestsGoByPriorityBandThenArrival() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 1)
        let busy = RequestID(high: 9, low: 9)
        _ = broker.request(clientA, busy)
        let asked: [(UInt64, Int8)] = [(1, 0), (2, -50), (3, 100), (4, 50), (5, 0), (6, 127), (7, 1), (8, -1)]
        for (low, priority) in asked { _ = broker.request(clientA, RequestID(high: 1, low: low), priority: priority) }
        var order: [UInt64] = []
        var last = busy
        while let next = dispatched(broker.reply(worker1, client: clientA, last)).first?.1 {
            order.append(next.low)
            last = next
        }
        #expect(order == [3, 6, 4, 7, 1, 5, 2, 8])
    }

    @Test func requestsBackFromALostWorkerKeepTheirPlaceAmongPriorities() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        let normal = RequestID(high: 1, low: 1)
        let low = RequestID(high: 1, low: 2)
        _ = broker.request(clientA, normal)
        _ = broker.request(clientA, low, priority: -50)  // both at worker1
        let urgent = RequestID(high: 1, low: 3)
        let later = RequestID(high: 1, low: 4)
        _ = broker.request(clientA, urgent, priority: 100)
        _ = broker.request(clientA, later)
        _ = broker.worker(worker1, .disconnect)
        let join = broker.ready(worker2, capacity: 4)
        #expect(dispatched(join).map(\.1) == [urgent, normal, later, low])
    }

    @Test func aWorkerServingSeveralServicesTakesTheOldestRequestAmongThem() {
        var broker = BrokerHarness()
        _ = broker.request(clientA, id1, service: "b")
        _ = broker.request(clientA, id2, service: "a")
        _ = broker.request(clientA, id3, service: "b")
        let actions = broker.ready(worker1, capacity: 3, services: ["a", "b"])
        #expect(dispatched(actions).map(\.1) == [id1, id2, id3])
    }

    @Test func requestsOnlyGoToWorkersServingTheirService() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 4, services: ["sky.echo"])
        #expect(dispatched(broker.request(clientA, id1, service: "sky.scan")).isEmpty)
        let actions = broker.ready(worker2, capacity: 1, services: ["sky.scan"])
        #expect(dispatched(actions).map(\.0) == [worker2])
    }

    @Test func payloadsPassThroughUntouched() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        let body: [UInt8] = [0, 0xff, 0x7b, 0x00, 0x10]
        let actions = broker.request(clientA, id1, body: body)
        guard case .sendToWorker(_, .request(_, let request)) = effects(actions).first else {
            Issue.record("expected a dispatch")
            return
        }
        #expect(request.body == body)
    }
}

@Suite("Broker state machine: workers leaving and misbehaving")
struct BrokerMembershipTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let worker2 = PeerID([0, 0, 0, 1, 2])
    let stranger = PeerID([0, 0, 0, 9, 9])

    @Test func aGracefulDisconnectRequeuesHeldTasksAtTheFrontAndHandsThemOn() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 2)
        let ids = (1...3).map { RequestID(high: 2, low: UInt64($0)) }
        for id in ids { _ = broker.request(client, id) }  // 1 and 2 at worker1, 3 queued

        let leave = broker.worker(worker1, .disconnect)
        let event = events(leave).first { $0.event == .workerDisconnected }
        #expect(events(leave).filter { $0.event == .taskRedispatched }.count == 2)
        #expect(event?.reason == .graceful)
        #expect(event?.tasksHeld == 2)
        #expect(broker.machine.queuedCount == 3)
        #expect(broker.machine.counters.requeued == 2)

        let join = broker.ready(worker2, capacity: 3)
        #expect(dispatched(join).map(\.1) == ids)
    }

    @Test func anUnreachableWorkerIsRemovedAndItsTasksGoElsewhere() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        _ = broker.ready(worker2)
        let id = RequestID(high: 3, low: 1)
        let target = dispatched(broker.request(client, id)).first!.0
        let other = target == worker1 ? worker2 : worker1
        var actions: [BrokerAction] = []
        broker.machine.workerUnreachable(target, now: broker.now, into: &actions)
        #expect(events(actions).first { $0.event == .workerDisconnected }?.reason == .unreachable)
        #expect(dispatched(actions).map(\.0) == [other])
        #expect(broker.machine.workerCount == 1)
    }

    @Test func replyAndHeartbeatFromAnUnknownPeerAreAnsweredWithDisconnect() {
        var broker = BrokerHarness()
        let reply = broker.reply(stranger, client: client, RequestID(high: 0, low: 1))
        #expect(effects(reply) == [.sendToWorker(stranger, .disconnect)])
        #expect(broker.machine.counters.staleReplies == 1)
        let heartbeat = broker.worker(stranger, .heartbeat)
        #expect(effects(heartbeat) == [.sendToWorker(stranger, .disconnect)])
        #expect(broker.machine.counters.unknownWorkerMessages == 1)
        // A DISCONNECT from a stranger needs no answer.
        #expect(effects(broker.worker(stranger, .disconnect)).isEmpty)
    }

    @Test func aReplyForATaskTheWorkerDoesNotHoldIsDroppedAndCounted() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        let actions = broker.reply(worker1, client: client, RequestID(high: 7, low: 7))
        #expect(effects(actions).isEmpty)
        #expect(broker.machine.counters.staleReplies == 1)
    }

    @Test func aSecondReadyIsAProtocolErrorThatDropsTheWorker() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1)
        let actions = broker.ready(worker1)
        #expect(events(actions).first?.reason == .protocolError)
        #expect(effects(actions).last == .sendToWorker(worker1, .disconnect))
        #expect(broker.machine.workerCount == 0)
    }

    @Test func reservedServiceNamesCannotBeRegistered() {
        var broker = BrokerHarness()
        let actions = broker.ready(worker1, services: ["mmi.workers"])
        #expect(
            effects(actions) == [
                .sendToWorker(
                    worker1, .refused(reason: "service names starting with mmi. are the broker's own: mmi.workers"))
            ])
        #expect(broker.machine.workerCount == 0)
    }

    @Test func eventSequenceNumbersStrictlyIncrease() {
        var broker = BrokerHarness()
        var all: [SkyEvent] = []
        var actions: [BrokerAction] = []
        broker.machine.subscriberJoined(now: broker.now, into: &actions)
        all += events(actions)
        all += events(broker.ready(worker1))
        all += events(broker.ready(worker2))
        all += events(broker.worker(worker1, .disconnect))
        all += events(broker.ready(worker2))  // protocol error
        #expect(all.map(\.seq) == [1, 2, 3, 4, 5])
        #expect(
            all.map(\.event) == [
                .brokerHello, .workerConnected, .workerConnected, .workerDisconnected, .workerDisconnected,
            ])
        #expect(broker.machine.snapshot(now: broker.now).seq == 5)
    }

    @Test func helloDescribesTheCurrentWorkersAndQueue() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 3)
        _ = broker.request(client, RequestID(high: 0, low: 1), service: "other")
        var actions: [BrokerAction] = []
        broker.machine.subscriberJoined(now: broker.now, into: &actions)
        let hello = events(actions).first
        #expect(hello?.workers?.map(\.name) == ["w-\(worker1)"])
        #expect(hello?.queued == 1)
    }
}

@Suite("Broker state machine: bad input and broker services")
struct BrokerInputTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID([0, 0, 0, 1, 1])

    static let malformed: [[[UInt8]]] = [
        [],
        [Array("SKYC01".utf8)],
        [Array("XXXX01".utf8), [1]],
        [Array("SKYC01".utf8), [0x33]],
        [Array("SKYC01".utf8), [1], [1, 2, 3], Array("s".utf8), [0, 0, 0, 0, 0, 0, 0, 0], []],
    ]

    @Test func malformedClientMessagesAreDroppedCountedAndLogged() {
        var broker = BrokerHarness()
        for (index, frames) in Self.malformed.enumerated() {
            let actions = broker.client(client, frames)
            #expect(effects(actions).isEmpty)
            guard case .log(.warning, let line, let fields) = actions.first else {
                Issue.record("no log line for malformed message \(index)")
                continue
            }
            #expect(line == "dropped malformed message from client")
            #expect(fields["peer"] == "0000000001")
            #expect(fields["error"]?.isEmpty == false)
        }
        #expect(broker.machine.counters.malformedClientMessages == UInt64(Self.malformed.count))
        // And the broker still serves.
        _ = broker.ready(worker)
        #expect(dispatched(broker.request(client, RequestID(high: 0, low: 1))).count == 1)
    }

    @Test func malformedWorkerMessagesAreDroppedAndCounted() {
        var broker = BrokerHarness()
        // 0x0A: no command (0x09 is FEATURES, which a broker before it dropped just like this).
        let actions = broker.worker(worker, frames: [Array("SKYW01".utf8), [0x0A]])
        #expect(effects(actions).isEmpty)
        #expect(broker.machine.counters.malformedWorkerMessages == 1)
    }

    @Test func mmiServiceAnswers200Or404() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, services: ["sky.scan"])
        let known = broker.request(
            client, RequestID(high: 0, low: 1), service: "mmi.service", body: Array("sky.scan".utf8))
        let unknown = broker.request(
            client, RequestID(high: 0, low: 2), service: "mmi.service", body: Array("nope".utf8))
        #expect(
            effects(known) == [
                .sendToClient(
                    client,
                    .reply(TaskReply(requestID: RequestID(high: 0, low: 1), status: .ok, body: Array("200".utf8))))
            ])
        #expect(
            effects(unknown) == [
                .sendToClient(
                    client,
                    .reply(TaskReply(requestID: RequestID(high: 0, low: 2), status: .ok, body: Array("404".utf8))))
            ])
    }

    @Test func mmiWorkersReturnsASnapshot() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 2)
        _ = broker.request(client, RequestID(high: 0, low: 1))
        _ = broker.request(client, RequestID(high: 0, low: 2), service: "idle")
        let actions = broker.request(client, RequestID(high: 0, low: 3), service: "mmi.workers")
        guard case .sendToClient(_, .reply(let reply)) = effects(actions).first else {
            Issue.record("no reply")
            return
        }
        let snapshot = try JSONDecoder().decode(ClusterSnapshot.self, from: Data(reply.body))
        #expect(snapshot.workers.count == 1)
        #expect(snapshot.workers.first?.inFlight == 1)
        #expect(snapshot.queued == ["idle": 1])
        #expect(snapshot.counters.requestsAccepted == 2)
    }

    /// The workers' socket reads a peer's address only for a READY (a metadata lookup a
    /// message): told by the one-byte command first, then the signature.
    @Test func onlyAReadyAsksForThePeersAddress() {
        let ready = WorkerToBroker.ready(WorkerAnnouncement(name: "w", capacity: 2, services: ["sky.scan"]))
        #expect(BrokerStateMachine.looksLikeReady(Frames(ready.encode())))
        let tag = DeliveryTag([0, 0, 0, 1, 0, 0, 0, 1])
        let reply = TaskReply(requestID: RequestID(high: 0, low: 1), status: .ok, body: [0x01])
        let notReady: [Frames] = [
            WorkerToBroker.reply(tag: tag, reply).frames(),
            // A packed REPLY whose body is the one byte READY's command is.
            WorkerToBroker.packedReply(tag: tag, reply).frames(),
            Frames(WorkerToBroker.heartbeat.encode()),
            Frames([[0x01], [0x01]]),
            Frames([WireFormat.workerSignature]),
            Frames([WireFormat.workerSignature, [0x01, 0x00]]),
        ]
        for frames in notReady { #expect(!BrokerStateMachine.looksLikeReady(frames), "\(frames.arrays)") }
    }

    @Test func snapshotsAndStatsShowEachWorkersHostLoadAndLastWord() {
        var broker = BrokerHarness()
        var actions: [BrokerAction] = []
        broker.machine.workerMessage(
            from: worker,
            frames: WorkerToBroker.ready(WorkerAnnouncement(name: "w", capacity: 2, services: ["sky.scan"]))
                .encode(), host: "10.0.0.7", now: broker.now, into: &actions)
        _ = broker.request(client, RequestID(high: 0, low: 1))
        _ = broker.request(client, RequestID(high: 0, low: 2))
        _ = broker.advance(.milliseconds(300))
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 1))
        _ = broker.advance(.milliseconds(450))
        let info = broker.machine.snapshot(now: broker.now).workers.first
        #expect(info?.host == "10.0.0.7")
        #expect(info?.completed == 1 && info?.inFlight == 1)
        #expect(info?.lastHeardMilliseconds == 450)
        // broker.stats carries the same per-worker load, once a second.
        let stats = broker.advance(.milliseconds(600)).compactMap { action -> SkyEvent? in
            if case .publish(let event) = action, event.event == .brokerStats { event } else { nil }
        }
        #expect(stats.first?.workers?.first?.completed == 1)
        #expect(stats.first?.workers?.first?.lastHeardMilliseconds == 1050)
        #expect(broker.machine.snapshot(now: broker.now).broker == broker.machine.configuration.instance)
    }

    /// Completed work is what workers replied, per worker and in all, with the failures
    /// apart; the broker's own answers (a watcher's `mmi.workers`) are not work.
    @Test func completedCountsWorkersRepliesAndFailedTheUnsuccessfulOnes() {
        var broker = BrokerHarness()
        var actions: [BrokerAction] = []
        broker.machine.workerMessage(
            from: worker,
            frames: WorkerToBroker.ready(WorkerAnnouncement(name: "w", capacity: 4, services: ["sky.scan"])).encode(),
            now: broker.now, into: &actions)
        for low in 1...3 { _ = broker.request(client, RequestID(high: 0, low: UInt64(low))) }
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 1))
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 2), status: .handlerError)
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 3), status: .cancelled)
        _ = broker.request(client, RequestID(high: 0, low: 9), service: BrokerService.workers)
        let snapshot = broker.machine.snapshot(now: broker.now)
        #expect(snapshot.tasksCompleted == 3 && snapshot.tasksFailed == 2)
        #expect(snapshot.counters.repliesSent == 4, "the mmi answer is a reply, not work")
        #expect(snapshot.workers.first?.completed == 3 && snapshot.workers.first?.failed == 2)
        _ = broker.advance(.zero)  // the first tick sets the stats clock
        let stats = broker.advance(.seconds(1)).compactMap { action -> BrokerStats? in
            if case .publish(let event) = action { event.stats } else { nil }
        }
        #expect(stats.first?.completed == 3 && stats.first?.failed == 2, "\(stats)")
    }

    @Test func unknownBrokerServicesAnswer501() {
        var broker = BrokerHarness()
        let actions = broker.request(client, RequestID(high: 0, low: 1), service: "mmi.nope")
        guard case .sendToClient(_, .reply(let reply)) = effects(actions).first else {
            Issue.record("no reply")
            return
        }
        #expect(reply.status == .unknownService)
        #expect(RemoteErrorBody(decoding: reply.body).message.hasPrefix("501"))
    }
}
