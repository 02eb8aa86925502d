import SkyProtocol
import Testing

@testable import Sky

/// The events stream's rule, driven by hand: what a subscription delivers in order, and the
/// snapshots the feed would take.
@Suite("Event sequence")
struct EventSequenceTests {
    static func hello(_ seq: UInt64, run: String) -> SkyEvent {
        SkyEvent(seq: seq, event: .brokerHello, time: "", workers: [], broker: run)
    }

    static func connected(_ seq: UInt64, _ id: String) -> SkyEvent {
        SkyEvent(
            seq: seq, event: .workerConnected, time: "",
            worker: WorkerInfo(id: id, name: id, capacity: 1, services: ["sky.echo"]))
    }

    static func stats(_ seq: UInt64) -> SkyEvent {
        SkyEvent(seq: seq, event: .brokerStats, time: "")
    }

    static func snapshot(_ seq: UInt64, run: String, workers: [String] = []) -> ClusterSnapshot {
        ClusterSnapshot(
            seq: seq, workers: workers.map { WorkerInfo(id: $0, name: $0, capacity: 1, services: ["sky.echo"]) },
            queued: [:], inFlight: 0, counters: BrokerCounters(), broker: run)
    }

    /// Feeds `events` in order, answering each snapshot with the next of `snapshots`; returns
    /// what the consumer would see: "snapshot <seq>" and "<kind> <seq>".
    static func run(_ sequence: inout EventSequence, _ events: [SkyEvent], snapshots: [ClusterSnapshot]) -> [String] {
        var seen: [String] = []
        var snapshots = snapshots[...]
        for event in events {
            switch sequence.read(event) {
            case .deliver(let event): seen.append("\(event.event) \(event.seq)")
            case .skip: break
            case .snapshot:
                guard let snapshot = snapshots.popFirst() else {
                    seen.append("snapshot ?")
                    continue
                }
                seen.append("snapshot \(snapshot.seq)")
                if let pending = sequence.took(snapshot, after: event) {
                    seen.append("\(pending.event) \(pending.seq)")
                }
            }
        }
        return seen
    }

    @Test func aSnapshotComesFirstThenEveryLaterEventOnce() {
        var sequence = EventSequence()
        let seen = Self.run(
            &sequence, [Self.hello(1, run: "A"), Self.connected(2, "w1"), Self.stats(3), Self.stats(3), Self.stats(4)],
            snapshots: [Self.snapshot(1, run: "A")])
        #expect(seen == ["snapshot 1", "worker.connected 2", "broker.stats 3", "broker.stats 4"])
    }

    @Test func aGapTakesANewSnapshot() {
        var sequence = EventSequence()
        let seen = Self.run(
            &sequence, [Self.hello(1, run: "A"), Self.stats(2), Self.stats(9), Self.stats(10)],
            snapshots: [Self.snapshot(1, run: "A"), Self.snapshot(8, run: "A")])
        #expect(seen == ["snapshot 1", "broker.stats 2", "snapshot 8", "broker.stats 9", "broker.stats 10"])
    }

    @Test func aHelloOfANewRunTakesANewSnapshotAndItsLowNumbersCount() {
        var sequence = EventSequence()
        let seen = Self.run(
            &sequence,
            [Self.hello(1, run: "A"), Self.stats(40), Self.hello(1, run: "B"), Self.connected(2, "w1")],
            snapshots: [Self.snapshot(39, run: "A"), Self.snapshot(1, run: "B")])
        #expect(seen == ["snapshot 39", "broker.stats 40", "snapshot 1", "worker.connected 2"])
    }

    /// The dashboard that showed no workers for good (skyweb started just before a broker
    /// restart): the old run's hello asked for the first snapshot, which the new run answered,
    /// taken before the workers came back; the old run's last event was still in the
    /// subscription, then came the new run's hello and its workers' registrations, numbered
    /// below the old run's events.
    @Test func eventsOfTheOldRunLeftInTheSubscriptionDoNotHideTheNewRunsEvents() {
        var sequence = EventSequence()
        let seen = Self.run(
            &sequence,
            [
                Self.hello(50, run: "A"), Self.stats(51),
                Self.hello(2, run: "B"), Self.connected(3, "w1"), Self.connected(4, "w2"),
            ],
            snapshots: [Self.snapshot(1, run: "B")])
        #expect(seen == ["snapshot 1", "broker.hello 2", "worker.connected 3", "worker.connected 4"])
    }

    @Test func aBrokerWhoseHelloNamesNoRunIsFollowedByNumbersAlone() {
        var sequence = EventSequence()
        let anonymous = SkyEvent(seq: 1, event: .brokerHello, time: "")
        let seen = Self.run(
            &sequence, [anonymous, Self.connected(2, "w1"), Self.stats(3)],
            snapshots: [ClusterSnapshot(seq: 1, workers: [], queued: [:], inFlight: 0, counters: BrokerCounters())])
        #expect(seen == ["snapshot 1", "worker.connected 2", "broker.stats 3"])
    }

    /// A broker paused while a standby took over wakes and sends what its socket still held,
    /// numbered far beyond the new run's events and with no hello before them (a watcher hears
    /// both brokers' events endpoints): they are dropped, and the new run's next events still
    /// come through (seen: skywatch silent for good after a frozen broker woke).
    @Test func leftoverEventsOfAWokenOldBrokerDoNotHideTheNewRunsEvents() {
        var sequence = EventSequence()
        let seen = Self.run(
            &sequence,
            [
                Self.hello(1, run: "A"), Self.stats(2),
                Self.hello(1, run: "B"), Self.stats(2), Self.stats(3),
                Self.stats(711), Self.stats(712),
                Self.stats(4), Self.connected(5, "w1"),
            ],
            snapshots: [
                Self.snapshot(1, run: "A"), Self.snapshot(1, run: "B"), Self.snapshot(3, run: "B"),
                Self.snapshot(3, run: "B"),
            ])
        #expect(
            seen == [
                "snapshot 1", "broker.stats 2", "snapshot 1", "broker.stats 2", "broker.stats 3", "snapshot 3",
                "snapshot 3", "broker.stats 4", "worker.connected 5",
            ])
    }
}
