import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The broker finds a message's worker by comparing its routing id with the last worker found
/// before it hashes it (``BrokerStateMachine/workerIndex(of:)``). A place found before workers
/// joined or left is not used after: the dictionary's places move as it grows and shrinks, and
/// a stale one would name another worker's record, or stop the process.
@Suite("Broker state machine: finding a message's worker")
struct BrokerWorkerLookupTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let first = PeerID([0, 0, 0, 1, 1])

    func others(_ range: Range<UInt8>) -> [PeerID] { range.map { PeerID([0, 0, 1, $0, 9]) } }

    func replies(_ actions: [BrokerAction]) -> [RequestID] {
        actions.compactMap { if case .sendToClient(client, .reply(let reply)) = $0 { reply.requestID } else { nil } }
    }

    @Test func aWorkersRepliesReachItsRecordWhileOthersJoinAndLeave() {
        var broker = BrokerHarness()
        _ = broker.ready(first, capacity: 1)
        var answered: [RequestID] = []
        // Only `first` serves sky.scan: each request goes to it, and its reply is found by its id.
        func roundTrip(_ n: UInt64) {
            #expect(dispatched(broker.request(client, requestID(n))).map(\.0) == [first])
            answered += replies(broker.reply(first, client: client, requestID(n)))
        }
        roundTrip(1)
        // Enough joins to grow the dictionary several times (its places all move).
        for peer in others(0..<40) { _ = broker.ready(peer, capacity: 1, services: ["other"]) }
        roundTrip(2)
        for peer in others(0..<39) { _ = broker.worker(peer, .disconnect) }
        roundTrip(3)
        // The same routing id leaves and comes back: a new record, found as such.
        _ = broker.worker(first, .disconnect)
        _ = broker.ready(first, capacity: 1)
        roundTrip(4)
        #expect(answered == [1, 2, 3, 4].map(requestID))
        #expect(broker.machine.workers[first]?.completed == 1)
        #expect(broker.machine.workers.count == 2)
    }
}
