import Foundation
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
            broker.machine.dropped(drop, into: &actions)
            #expect(broker.machine.counters[keyPath: counter] == before[keyPath: counter] + 1, "\(drop)")
            #expect(actions.count == 1, "\(drop): \(actions)")
            guard case .log(.warning, _, _) = actions.first else {
                Issue.record("\(drop): expected one warning, got \(actions)")
                continue
            }
        }
    }
}
