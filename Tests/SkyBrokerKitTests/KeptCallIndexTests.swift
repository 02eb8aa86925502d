import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The index of kept calls by id: a call answered leaves it at once; one that ended otherwise
/// goes at the next sweep, which comes once the index doubled since the last.
@Suite("Broker state machine: the kept calls' index")
struct KeptCallIndexTests {
    @Test func answeredKeptCallsLeaveTheIndexAtOnce() {
        var broker = BrokerHarness.withJournal()
        let client = PeerID([0, 0, 0, 0, 1])
        // Nobody serves it: each is answered noWorkers after the grace.
        for index in 0..<100 {
            _ = broker.request(
                client, RequestID(high: 1, low: UInt64(index)), service: "nobody", timeout: .seconds(60),
                noWorkersGrace: .milliseconds(1), keep: true)
        }
        #expect(broker.machine.keptCalls.calls.count == 100)
        _ = broker.advance(.seconds(1))
        #expect(broker.machine.inFlightCount == 0 && broker.machine.keptCalls.isEmpty)
    }

    @Test func staleEntriesGoWhenTheIndexDoubled() {
        var index = KeptCallIndex()
        for number in 0..<KeptCallIndex.sweepFloor - 1 {
            index.add(RequestID(high: 1, low: UInt64(number)), from: 1)
        }
        #expect(!index.needsSweep)
        index.add(RequestID(high: 2, low: 0), from: 1)
        #expect(index.needsSweep)
        // All but 600 ended without an answer the index saw.
        let stale = index.calls.keys.filter { $0.high == 1 && $0.low >= 600 }
        index.sweep(removing: Array(stale))
        #expect(index.calls.count == 601 && !index.needsSweep)
        // The next sweep at twice what the last one left (above the floor).
        for number in 0..<600 { index.add(RequestID(high: 3, low: UInt64(number)), from: 1) }
        #expect(!index.needsSweep)
        index.add(RequestID(high: 4, low: 0), from: 1)
        #expect(index.needsSweep, "1,202 entries: twice the 601 left")
    }
}
