import Sky
import SkyProtocol
import Testing

@testable import skywatch

/// What the broker dropped or refused: operations.md sends an operator to skywatch for it, and
/// skywatch showed none of it (only `--json`'s first snapshot had the counters, and no
/// `broker.stats` carried them).
@Suite("skywatch: dropped and refused input")
struct WatchDropsTests {
    static func stats(malformed: UInt64, stale: UInt64) -> BrokerStats {
        var stats = BrokerStats(
            workers: 0, capacity: 0, queued: 0, inFlight: 0, completed: 0, completedPerSecond: 0, failed: 0)
        var counters = BrokerCounters()
        counters.malformedClientMessages = malformed
        counters.staleReplies = stale
        counters.requestsAccepted = 40
        stats.counters = counters
        return stats
    }

    @Test func theTableAndThePipedLineSayWhatWasDropped() {
        var view = ClusterView()
        view.apply(
            .snapshot(ClusterSnapshot(seq: 1, workers: [], queued: [:], inFlight: 0, counters: BrokerCounters())))
        #expect(!WorkerTable.render(view, broker: "b").contains("dropped"), "nothing dropped, nothing said")
        let event = SkyEvent(
            seq: 2, event: .brokerStats, time: "12:00:00", stats: Self.stats(malformed: 531, stale: 18))
        view.apply(.event(event))
        let table = WorkerTable.render(view, broker: "b")
        #expect(table.contains("dropped: malformedClientMessages 531   staleReplies 18   "), "\(table)")
        #expect(!table.contains("requestsAccepted"), "a healthy broker's traffic is not a drop")
        let line = EventFormatter.line(event)
        #expect(line.contains(" dropped=malformedClientMessages:531,staleReplies:18"), "\(line)")
        // A stats event from an older broker, without counters, keeps what the view had.
        view.apply(
            .event(
                SkyEvent(
                    seq: 3, event: .brokerStats, time: "12:00:01",
                    stats: BrokerStats(
                        workers: 0, capacity: 0, queued: 0, inFlight: 0, completed: 0, completedPerSecond: 0))))
        #expect(view.counters?.malformedClientMessages == 531)
    }
}
