import SkyJSON
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Calls with concurrency keys at the broker: a key at its limit waits while a worker has free
/// credits and other keys' calls go; its place comes back with its call's reply or its
/// worker's loss, never earlier.
@Suite("Broker state machine: calls with concurrency keys")
struct BrokerConcurrencyKeyTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])
    let worker2 = PeerID([0, 0, 0, 1, 2])

    static func id(_ low: UInt64) -> RequestID { RequestID(high: 7, low: low) }

    @Test func aKeyAtItsLimitWaitsWhileOthersTakeTheFreeCredits() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 4)
        var sent: [RequestID] = []
        for low: UInt64 in 1...3 {
            sent += dispatched(broker.request(client, Self.id(low), key: "A", limit: 1)).map(\.1)
        }
        sent += dispatched(broker.request(client, Self.id(11), key: "B", limit: 1)).map(\.1)
        sent += dispatched(broker.request(client, Self.id(21))).map(\.1)
        #expect(sent == [Self.id(1), Self.id(11), Self.id(21)], "one of A, with a credit to spare")
        #expect(broker.machine.queuedCount == 2)
        // Who fills the queue: A, two waiting and one running under its limit; then B.
        let asked = broker.request(
            client, Self.id(99), service: BrokerService.serviceKeys, body: Array("sky.scan".utf8))
        let listing = asked.compactMap { action -> KeyListing? in
            guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == Self.id(99) else { return nil }
            return try? CanonicalJSON.decode(KeyListing.self, from: reply.body)
        }.first
        #expect(
            listing?.keys == [
                KeyState(key: "A", callsWaiting: 2, callsRunning: 1), KeyState(key: "B", callsRunning: 1),
            ], "\(String(describing: listing))")
        // A's call answered: its next goes, and only that one.
        let next = dispatched(broker.reply(worker1, client: client, Self.id(1))).map(\.1)
        #expect(next == [Self.id(2)])
        // A reply for another key frees no place of A's.
        #expect(dispatched(broker.reply(worker1, client: client, Self.id(11))).isEmpty)
        // The worker is lost: its calls wait again, A's place with them, and a new worker takes
        // one call of A and the rest.
        _ = broker.worker(worker1, .disconnect)
        let joined = dispatched(broker.ready(worker2, capacity: 4)).map(\.1)
        #expect(Set(joined) == [Self.id(2), Self.id(21)])
        let last = dispatched(broker.reply(worker2, client: client, Self.id(2))).map(\.1)
        #expect(last == [Self.id(3)])
        _ = broker.reply(worker2, client: client, Self.id(3))
        _ = broker.reply(worker2, client: client, Self.id(21))
        #expect(broker.machine.queuedCount == 0 && broker.machine.inFlightCount == 0)
    }

    /// A cancelled call keeps its key's place until its worker answers: the worker may still
    /// run it.
    @Test func aCancelledCallHoldsItsPlaceUntilItsWorkerAnswers() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 4)
        _ = broker.request(client, Self.id(1), key: "A", limit: 1)
        _ = broker.request(client, Self.id(2), key: "A", limit: 1)
        #expect(dispatched(broker.cancel(client, Self.id(1))).isEmpty)
        let after = dispatched(broker.reply(worker1, client: client, Self.id(1), status: .cancelled)).map(\.1)
        #expect(after == [Self.id(2)])
    }

    /// A kept call in flight is described from memory, with its key (nothing of it is on disk).
    @Test func aKeptCallInFlightIsDescribed() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, Self.id(1), timeout: .seconds(30), keep: true, key: "A", limit: 2)
        let asked = broker.request(
            client, Self.id(2), service: BrokerService.jobDescribe, body: JobID(Self.id(1)).bytes)
        let reply = try #require(
            asked.compactMap { action -> TaskReply? in
                guard case .sendToClient(_, .reply(let reply)) = action, reply.requestID == Self.id(2) else {
                    return nil
                }
                return reply
            }.first)
        let details = try CanonicalJSON.decode(JobDetails.self, from: reply.body)
        #expect(details.state == "running" && details.worker == "w-\(worker1)" && details.attempt == 1)
        #expect(details.concurrencyKey == "A" && details.concurrencyLimit == 2 && details.maxAttempts == 1)
    }

    /// A call whose key stays at its limit past its deadline is told so.
    @Test func aCallWaitingForItsKeyPastItsDeadlineIsToldWhy() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 4)
        _ = broker.request(client, Self.id(1), key: "A", limit: 1)
        _ = broker.request(client, Self.id(2), timeout: .milliseconds(500), key: "A", limit: 1)
        let expired = broker.advance(.seconds(1))
        let reply = try #require(
            expired.compactMap { action -> TaskReply? in
                guard case .sendToClient(_, .reply(let reply)) = action else { return nil }
                return reply
            }.first)
        #expect(reply.requestID == Self.id(2) && reply.status == .deadlineExceeded)
        #expect(
            RemoteErrorBody(decoding: reply.body).message.contains(
                "its concurrency key A was at its limit (1 running, at most 1)"), "\(reply)")
    }

    /// Calls of a service nobody serves are answered at the end of the grace, a parked key's
    /// too.
    @Test func aParkedKeysCallsAreAnsweredWhenNobodyServesTheService() {
        var broker = BrokerHarness()
        _ = broker.ready(worker1, capacity: 1)
        _ = broker.request(client, Self.id(1), key: "A", limit: 1)
        _ = broker.request(client, Self.id(2), key: "A", limit: 1)
        _ = broker.request(client, Self.id(3), key: "A", limit: 1)
        var actions = broker.worker(worker1, .disconnect)
        actions += broker.advance(.seconds(5))
        let answered = actions.compactMap { action -> ReplyStatus? in
            guard case .sendToClient(_, .reply(let reply)) = action else { return nil }
            return reply.status
        }
        #expect(answered == [.noWorkers, .noWorkers, .noWorkers])
        #expect(broker.machine.queuedCount == 0)
    }
}
