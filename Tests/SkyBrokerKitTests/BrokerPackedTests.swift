import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// docs/protocol.md, "Packed messages": the broker names `packed` in its FEATURES to every
/// worker, takes packed REPLYs from any registered worker, and sends packed REQUESTs only to a
/// worker whose last FEATURES named `packed`.
@Suite("Broker state machine: packed messages")
struct BrokerPackedTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID([0, 0, 0, 1, 1])

    static func id(_ n: UInt64) -> RequestID { RequestID(high: 0, low: n) }

    /// The command the broker sent to `worker` among `actions`.
    func sent(_ actions: [BrokerAction]) -> [BrokerToWorker] {
        actions.compactMap { if case .sendToWorker(worker, let command) = $0 { command } else { nil } }
    }

    func replies(_ actions: [BrokerAction]) -> [TaskReply] {
        actions.compactMap { if case .sendToClient(client, .reply(let reply)) = $0 { reply } else { nil } }
    }

    @Test func aWorkerThatAsksForPackedRequestsGetsThemAndItsPackedRepliesAnswerTheClient() throws {
        var broker = BrokerHarness()
        #expect(
            sent(broker.ready(worker, capacity: 4)).first
                == .features(["edition=2", "max-frame-size=16777216", "packed", "progress", "heartbeat-ms=1000"]))
        // Before it asks: framed.
        guard case .request(_, let framed)? = sent(broker.request(client, Self.id(1), body: [1])).first else {
            Issue.record("expected a framed REQUEST")
            return
        }
        #expect(framed.requestID == Self.id(1))
        #expect(sent(broker.worker(worker, .features(["packed"]))).isEmpty)
        guard case .packedRequest(let tag, let packed)? = sent(broker.request(client, Self.id(2), body: [2])).first
        else {
            Issue.record("expected a packed REQUEST once the worker asked")
            return
        }
        #expect(packed.requestID == Self.id(2) && packed.body == [2] && tag == broker.tag(Self.id(2), at: worker))
        // A packed REPLY answers its client, as a framed one does, and frees the credit.
        let answer = replies(
            broker.worker(worker, .packedReply(tag: tag, TaskReply(requestID: Self.id(2), status: .ok, body: [42]))))
        #expect(answer == [TaskReply(requestID: Self.id(2), attempt: 1, status: .ok, body: [42])])
        // The framed delivery may be answered packed too (Sky's worker does once its broker said `packed`).
        let late = replies(
            broker.worker(
                worker,
                .packedReply(
                    tag: broker.tag(Self.id(1), at: worker), TaskReply(requestID: Self.id(1), status: .ok, body: [7]))))
        #expect(late.map(\.requestID) == [Self.id(1)])
        #expect(broker.machine.inFlightCount == 0)
        // Its last FEATURES counts: without `packed`, framed again.
        _ = broker.worker(worker, .features([]))
        guard case .request? = sent(broker.request(client, Self.id(3))).first else {
            Issue.record("expected a framed REQUEST after a FEATURES without packed")
            return
        }
    }

    /// A packed REPLY for a delivery the worker does not hold is stale, as a framed one; from a
    /// peer that never registered it is answered DISCONNECT.
    @Test func aPackedReplyForNoDeliveryIsDroppedAndCounted() {
        var broker = BrokerHarness()
        _ = broker.ready(worker)
        let reply = TaskReply(requestID: Self.id(9), status: .ok, body: [])
        #expect(replies(broker.worker(worker, .packedReply(tag: [0, 0, 0, 0, 0, 0, 0, 9], reply))).isEmpty)
        #expect(broker.machine.counters.staleReplies == 1)
        let stranger = PeerID([0, 0, 0, 9, 9])
        let actions = broker.worker(stranger, .packedReply(tag: [1], reply))
        #expect(actions.contains(.sendToWorker(stranger, .disconnect)))
        #expect(broker.machine.counters.staleReplies == 2)
    }

    /// A traced dispatch tells the shell the form, since the shell builds that REQUEST.
    @Test func aTracedRequestToAPackedWorkerTellsTheShell() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker)
        _ = broker.worker(worker, .features(["packed", TraceContext.feature]))
        let actions = broker.request(client, Self.id(1), trace: Array("traceparent: 00-abc-def-01".utf8))
        let dispatch = try #require(
            actions.compactMap { if case .sendTraced(_, _, _, let dispatch) = $0 { dispatch } else { nil } }.first)
        #expect(dispatch.packed)
    }
}

/// The client side: a client whose REQUESTs come packed gets its replies packed, whichever of
/// the broker's answers they are; a client that sends framed REQUESTs never sees a packed one.
@Suite("Broker state machine: packed messages from clients")
struct BrokerPackedClientTests {
    let framedClient = PeerID([0, 0, 0, 0, 1])
    let packedClient = PeerID([0, 0, 0, 0, 2])
    let worker = PeerID([0, 0, 0, 1, 1])

    static func id(_ n: UInt64) -> RequestID { RequestID(high: 0, low: n) }

    static func request(_ n: UInt64, timeout: UInt32 = 0) -> TaskRequest {
        TaskRequest(
            requestID: id(n), service: "sky.scan",
            header: RequestHeader(attempt: 1, timeoutMilliseconds: timeout, noWorkersGraceMilliseconds: 0, priority: 5),
            body: [UInt8(n)])
    }

    func clientCommands(_ actions: [BrokerAction], to peer: PeerID) -> [BrokerToClient] {
        actions.compactMap { if case .sendToClient(peer, let command) = $0 { command } else { nil } }
    }

    @Test func aPackedClientsRequestRunsAndItsReplyGoesBackPacked() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 4)
        let dispatched = broker.client(packedClient, ClientToBroker.packedRequest(Self.request(1)).encode())
        guard case .sendToWorker(worker, .request(_, let handed))? = effects(dispatched).last else {
            Issue.record("expected a REQUEST to the worker, got \(dispatched)")
            return
        }
        // The fields the packed header carried, priority included (it orders the queue).
        #expect(handed == Self.request(1))
        _ = broker.client(framedClient, ClientToBroker.request(Self.request(2)).encode())
        let packedAnswer = clientCommands(broker.reply(worker, client: packedClient, Self.id(1)), to: packedClient)
        #expect(packedAnswer == [.packedReply(TaskReply(requestID: Self.id(1), attempt: 1, status: .ok, body: [42]))])
        let framedAnswer = clientCommands(broker.reply(worker, client: framedClient, Self.id(2)), to: framedClient)
        #expect(framedAnswer == [.reply(TaskReply(requestID: Self.id(2), attempt: 1, status: .ok, body: [42]))])
    }

    /// The broker's own failures for a packed client's request go packed too (here: its
    /// deadline passed while it waited), and its CANCEL's answer.
    @Test func theBrokersOwnAnswersToAPackedClientGoPacked() {
        var broker = BrokerHarness()
        // One busy worker: the packed client's requests wait.
        _ = broker.ready(worker, capacity: 1)
        _ = broker.client(framedClient, ClientToBroker.request(Self.request(9)).encode())
        _ = broker.client(packedClient, ClientToBroker.packedRequest(Self.request(1, timeout: 100)).encode())
        _ = broker.client(packedClient, ClientToBroker.packedRequest(Self.request(2)).encode())
        let expired = clientCommands(broker.advance(.milliseconds(200)), to: packedClient)
        guard case .packedReply(let reply)? = expired.first else {
            Issue.record("expected a packed deadlineExceeded, got \(expired)")
            return
        }
        #expect(reply.requestID == Self.id(1) && reply.status == .deadlineExceeded, "\(reply.status)")
        #expect(expired.count == 1)
        let cancelled = clientCommands(broker.cancel(packedClient, Self.id(2)), to: packedClient)
        guard case .packedReply(let answer)? = cancelled.first else {
            Issue.record("expected a packed cancelled, got \(cancelled)")
            return
        }
        #expect(answer.requestID == Self.id(2) && answer.status == .cancelled && answer.attempt == 0)
    }

    /// A packed REQUEST on the workers port is a client's mistake, told as a framed one is,
    /// in a packed REPLY as every answer to a packed REQUEST (it came framed).
    @Test func aPackedRequestOnTheWorkersPortIsToldItsEndpoint() {
        var broker = BrokerHarness()
        let actions = broker.worker(packedClient, frames: ClientToBroker.packedRequest(Self.request(1)).encode())
        #expect(broker.machine.counters.misdirectedMessages == 1)
        let answers = Self.answersOnTheWorkersPort(actions, to: packedClient)
        guard case .packedReply(let reply)? = answers.first else {
            Issue.record("expected a packed REPLY, got \(answers)")
            return
        }
        #expect(reply.requestID == Self.id(1) && reply.status == .wrongEndpoint)
    }

    /// What the broker sent `peer` on the workers port, read as client commands.
    static func answersOnTheWorkersPort(_ actions: [BrokerAction], to peer: PeerID) -> [BrokerToClient] {
        actions.compactMap { action in
            guard case .sendRaw(.workers, peer, let frames) = action else { return nil }
            return try? BrokerToClient.decode(frames)
        }
    }

    /// A client's CANCEL on the workers port is the other protocol's message too: it was
    /// counted as a malformed worker message and logged as an "unknown signature".
    @Test func aCancelOnTheWorkersPortIsToldItsEndpoint() {
        var broker = BrokerHarness()
        let actions = broker.worker(packedClient, frames: ClientToBroker.cancel(Self.id(3)).encode())
        #expect(broker.machine.counters.misdirectedMessages == 1)
        #expect(broker.machine.counters.malformedWorkerMessages == 0)
        let answers = Self.answersOnTheWorkersPort(actions, to: packedClient)
        guard case .reply(let reply)? = answers.first else {
            Issue.record("expected a REPLY, got \(answers)")
            return
        }
        #expect(reply.requestID == Self.id(3) && reply.status == .wrongEndpoint && reply.attempt == 0)
    }
}
