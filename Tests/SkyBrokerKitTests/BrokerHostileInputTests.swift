import Foundation
import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Broker state machine: what hostile or careless peers cannot do")
struct BrokerHostileInputTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID(Array("worker-x".utf8))

    /// Requests that expire or are cancelled while waiting for a service nobody serves leave
    /// nothing behind: no queue entries, no deadline entries (the fuzz test found this).
    @Test func expiredAndCancelledRequestsForAnUnservedServiceLeaveNothingBehind() {
        var broker = BrokerHarness()
        for round in 0..<10 {
            for index in 0..<1000 {
                let id = RequestID(high: UInt64(round), low: UInt64(index))
                _ = broker.request(client, id, service: "nobody.\(index % 7)", timeout: .milliseconds(50))
                if index.isMultiple(of: 3) { _ = broker.cancel(client, id) }
            }
            _ = broker.advance(.milliseconds(100))
        }
        #expect(broker.machine.queuedCount == 0)
        let entries = broker.machine.bookkeepingEntries
        #expect(entries.queued <= 256 + 1000, "dead queue entries piled up: \(entries.queued)")
        #expect(entries.deadlines <= 2048, "dead deadline entries piled up: \(entries.deadlines)")
        let counters = broker.machine.counters
        #expect(counters.noWorkersAnswered + counters.cancelled == 10_000)
    }

    /// A registration belongs to the key that made it: a message from its routing id under
    /// another key is not acted on, and ends the registration instead of passing it on.
    @Test func aMessageUnderAnotherKeyEndsTheRegistrationAndIsNotActedOn() {
        var broker = BrokerHarness()
        let ready = WorkerToBroker.ready(WorkerAnnouncement(name: "owner", capacity: 2, services: ["sky.scan"]))
        _ = broker.worker(worker, frames: ready.encode(), key: "worker:A")
        _ = broker.request(client, RequestID(high: 1, low: 1))
        #expect(broker.machine.inFlightCount == 1)
        // The same key is fine.
        _ = broker.worker(worker, frames: WorkerToBroker.heartbeat.encode(), key: "worker:A")
        #expect(broker.machine.counters.spoofedWorkerMessages == 0)
        // Another key: a READY that would re-register it with more capacity is dropped.
        let impostor = WorkerToBroker.ready(WorkerAnnouncement(name: "impostor", capacity: 8, services: ["sky.scan"]))
        let actions = broker.worker(worker, frames: impostor.encode(), key: "worker:B")
        #expect(broker.machine.counters.spoofedWorkerMessages == 1)
        #expect(broker.machine.workerCount == 0, "the owner's registration ended")
        #expect(broker.machine.queuedCount == 1, "its task waits for another worker")
        #expect(!effects(actions).contains { if case .sendToWorker(_, .request) = $0 { true } else { false } })
    }

    /// A worker's reply with a status only the broker sends reaches the client as an
    /// `internalError` naming the worker and the status: passed on as it came, `wrongEndpoint`
    /// stopped the client's every call, and `keptAsJob` named a job that was never kept.
    @Test func aStatusOnlyTheBrokerSendsIsNotPassedOnFromAWorker() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 8, services: ["sky.scan"])
        let refused: [ReplyStatus] = ReplyStatus.allCases.filter { !$0.isWorkersToSend }
        #expect(refused.map(\.rawValue) == [5, 6, 8, 11, 12, 13, 14])
        for (index, status) in refused.enumerated() {
            let id = RequestID(high: 7, low: UInt64(index))
            _ = broker.request(client, id)
            let body = RemoteErrorBody(type: "x", message: "from the worker").encoded()
            let answer = replies(broker.reply(worker, client: client, id, status: status, body: body), to: id)
            #expect(answer.map(\.status) == [.internalError], "\(status)")
            let said = RemoteErrorBody(decoding: answer.first?.body ?? [])
            #expect(said.type == BrokerStateMachine.invalidWorkerStatusType)
            #expect(
                said.message.contains("status \(status.rawValue) (\(status))")
                    && said.message.contains("from the worker"))
        }
        // What a worker may send goes through as it came.
        let id = RequestID(high: 8, low: 1)
        _ = broker.request(client, id)
        #expect(
            replies(broker.reply(worker, client: client, id, status: .handlerError), to: id).map(\.status) == [
                .handlerError
            ])
    }

    /// A status this edition does not know is a failure (docs/protocol.md: statuses are only
    /// ever added): the call is answered and the worker's credit comes back, where the reply was
    /// dropped as malformed, its call left hanging and the credit lost.
    @Test func aReplyWithAStatusNobodyKnowsAnswersItsCall() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        let first = RequestID(high: 9, low: 1)
        let second = RequestID(high: 9, low: 2)
        _ = broker.request(client, first)
        _ = broker.request(client, second)
        for packed in [false, true] {
            let id = packed ? second : first
            var frames = WorkerToBroker.reply(
                tag: broker.tag(id, at: worker), TaskReply(requestID: id, status: .ok, body: [1])
            )
            .encode()
            if packed {
                frames = WorkerToBroker.packedReply(
                    tag: broker.tag(id, at: worker), TaskReply(requestID: id, status: .ok, body: [1])
                ).encode()
                // The status is the header's byte after the signature, the command and the id.
                frames[0][frames[0].count - 1 - broker.tag(id, at: worker).bytes.count] = 200
            } else {
                frames[4] = [200]
            }
            let actions = broker.worker(worker, frames: frames)
            let answer = try #require(replies(actions, to: id).first, "\(actions)")
            #expect(answer.status == .internalError)
            let said = RemoteErrorBody(decoding: answer.body)
            #expect(said.type == ReplyStatus.unknownStatusType && said.message.contains("status 200"))
            if !packed { #expect(dispatched(actions).map(\.1) == [second], "the credit came back") }
        }
        #expect(broker.machine.counters.malformedWorkerMessages == 0)
    }

    /// Any message from a registered worker is a sign of life, one the broker cannot read too
    /// (a newer worker's command): it expired a worker that sent only those.
    /// A peer that registers, sends a second READY (and is disconnected for it), registers
    /// again, over and over, writes lines within the peer-line budget, and short ones: it wrote
    /// three lines a cycle, one of them a quarter of a megabyte of service names, and filled
    /// the disk.
    @Test func aPeerThatRegistersOverAndOverWritesBoundedLines() {
        var broker = BrokerHarness()
        let names = (0..<1024).map { "r.\($0)." + String(repeating: "y", count: 240) }
        var lines: [(String, [String: String])] = []
        for _ in 0..<50 {
            for action in broker.ready(worker, services: names) + broker.ready(worker, services: names) {
                if case .log(_, let line, let fields) = action { lines.append((line, fields)) }
            }
        }
        let perSecond = broker.machine.configuration.peerLinesPerSecond
        // Three texts within one second: each at most the budget, and a summary each later.
        #expect(lines.count <= 3 * perSecond, "\(lines.count) lines")
        let longest = lines.map { $0.1.values.reduce(0) { $0 + $1.utf8.count } }.max() ?? 0
        #expect(longest < 8192, "a line of \(longest) bytes")
        _ = broker.ready(worker, services: names)
        #expect(broker.machine.workerCount == 1, "a READY after the disconnect registers it again")
    }

    @Test func aMalformedMessageFromARegisteredWorkerKeepsItAlive() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        for _ in 0..<20 {
            _ = broker.worker(worker, frames: [WireFormat.workerSignature, [0x0B]])
            _ = broker.advance(.milliseconds(500))
        }
        #expect(broker.machine.workerCount == 1)
        #expect(broker.machine.counters.malformedWorkerMessages == 20)
    }

    /// Cancelled requests in the middle of a queue (the head stays live, so nothing is trimmed
    /// from the front) are compacted away once they outnumber the live ones, and the survivors
    /// keep their order.
    @Test func cancelledRequestsInTheMiddleOfAQueueAreCompactedAway() {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["busy"])
        _ = broker.request(client, RequestID(high: 9, low: 9), service: "busy")  // holds the worker
        let ids = (0..<2000).map { RequestID(high: 1, low: UInt64($0)) }
        for id in ids { _ = broker.request(client, id, service: "busy", body: [UInt8](repeating: 1, count: 100)) }
        let survivors = ids.enumerated().filter { $0.offset.isMultiple(of: 4) }.map(\.element)
        for (index, id) in ids.enumerated() where !index.isMultiple(of: 4) { _ = broker.cancel(client, id) }
        #expect(broker.machine.queuedCount == 500)
        #expect(broker.machine.queuedBytes == 500 * 100, "cancelled bodies are let go at once")
        #expect(broker.machine.bookkeepingEntries.queued == 2000, "dead entries stay until compaction")
        _ = broker.advance(.milliseconds(10))
        #expect(broker.machine.bookkeepingEntries.queued == 500, "compacted: only live entries remain")
        #expect(broker.machine.deadQueued == 0)
        // The survivors go to the worker in their order, one per freed credit.
        var order: [RequestID] = []
        var running = RequestID(high: 9, low: 9)
        for _ in 0..<500 {
            let next = dispatched(broker.reply(worker, client: client, running))
            guard let (_, id) = next.first else { break }
            order.append(id)
            running = id
        }
        #expect(order == survivors)
    }
}

extension BrokerHostileInputTests {
    /// What the shell keeps from the machine (over the limits, unauthenticated, a refused
    /// handshake) is counted by the machine, once each, with one log line.
    @Test func eachDropTheShellReportsIsCountedOnceAndLoggedOnce() {
        var broker = BrokerHarness()
        let drops: [(BrokerStateMachine.Drop, KeyPath<BrokerCounters, UInt64>)] = [
            (.oversized(port: "client", frames: 9, bytes: 10, frameLimit: 8, byteLimit: 100), \.oversizedMessages),
            (.unauthenticated(port: "worker"), \.unauthenticatedMessages),
            (.handshakeDenied(reason: "key not on the list"), \.handshakesDenied),
        ]
        for (drop, counter) in drops {
            let before = broker.machine.counters
            var actions: [BrokerAction] = []
            broker.machine.dropped(drop, now: broker.now, into: &actions)
            #expect(broker.machine.counters[keyPath: counter] == before[keyPath: counter] + 1, "\(drop)")
            #expect(actions.count == 1, "\(drop): \(actions)")
            guard case .log(.warning, _, _) = actions.first else {
                Issue.record("\(drop): expected one warning, got \(actions)")
                continue
            }
        }
    }
}

@Suite("Broker state machine: log lines about peers within a budget")
struct BrokerPeerLinesTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID(Array("worker-x".utf8))

    /// Log lines, by message, among actions.
    static func lines(_ actions: [BrokerAction]) -> [(message: String, fields: [String: String])] {
        actions.compactMap { action in
            guard case .log(_, let message, let fields) = action else { return nil }
            return (message, fields)
        }
    }

    /// A flood of garbage costs a few lines a second, not one per message: the rest are counted
    /// and summarised once the second is over, and the counters count every message.
    @Test func aFloodOfGarbageWritesAFewLinesASecondAndASummaryOfTheRest() {
        var broker = BrokerHarness()
        let perSecond = broker.machine.configuration.peerLinesPerSecond
        var actions: [BrokerAction] = []
        for index in 0..<5000 {
            broker.now = broker.now + .microseconds(100)
            actions += broker.client(client, [Array("SKYC01".utf8), [0x7f], [UInt8(index % 256)]])
            actions += broker.worker(worker, frames: [Array("SKYW01".utf8), [0x7f]])
        }
        // 0.5 s of flood: the budget of each of the two lines.
        let written = Self.lines(actions)
        #expect(written.filter { $0.message == "dropped malformed message from client" }.count == perSecond)
        #expect(written.filter { $0.message == "dropped malformed message from worker" }.count == perSecond)
        #expect(written.count == 2 * perSecond)
        #expect(broker.machine.counters.malformedClientMessages == 5000)
        #expect(broker.machine.counters.malformedWorkerMessages == 5000)

        // The tick after the second is over summarises each line's held-back messages, once.
        let summaries = Self.lines(broker.advance(.milliseconds(600))).filter { $0.fields["heldBack"] != nil }
        #expect(
            Set(summaries.map { "\($0.fields["line"] ?? "") \($0.fields["heldBack"] ?? "")" }) == [
                "dropped malformed message from client \(5000 - perSecond)",
                "dropped malformed message from worker \(5000 - perSecond)",
            ])
        #expect(Self.lines(broker.advance(.seconds(1))).isEmpty)

        // A new second logs again, and the broker still serves.
        let again = Self.lines(broker.client(client, [Array("SKYC01".utf8)]))
        #expect(again.map(\.message) == ["dropped malformed message from client"])
        _ = broker.ready(PeerID([0, 0, 0, 1, 1]))
        #expect(dispatched(broker.request(client, RequestID(high: 0, low: 1))).count == 1)
    }

    /// A flood of one kind does not hide another: a worker refused for its READY is still
    /// logged while garbage fills the malformed line's budget.
    @Test func aFloodOfOneLineDoesNotSilenceAnother() {
        var broker = BrokerHarness()
        for _ in 0..<100 { _ = broker.client(client, [Array("SKYC01".utf8)]) }
        let actions = broker.worker(worker, frames: [Array("SKYW01".utf8), [0x01], Array("0.0".utf8)])
        let refused = Self.lines(actions).filter { $0.message == "refused a worker" }
        #expect(refused.count == 1)
        #expect(refused.first?.fields["reason"]?.contains("invalid READY") == true)
    }

    /// A line that is held back costs no formatting: its fields are not built.
    @Test func theFieldsOfAHeldBackLineAreNotBuilt() {
        var machine = BrokerStateMachine()
        let now = MonotonicInstant.now
        var built = 0
        var actions: [BrokerAction] = []
        for _ in 0..<100 {
            machine.logAboutPeer(.info, "a line", now: now, into: &actions) {
                built += 1
                return ["n": "\(built)"]
            }
        }
        #expect(built == machine.configuration.peerLinesPerSecond)
        #expect(actions.count == built)
    }
}
