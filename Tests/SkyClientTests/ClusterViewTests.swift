import Testing

@testable import Sky

@Suite("Cluster view")
struct ClusterViewTests {
    static func worker(_ id: String, _ name: String) -> WorkerInfo {
        WorkerInfo(id: id, name: name, capacity: 4, services: ["sky.scan"])
    }

    @Test func aSnapshotThenEventsGiveTheCurrentWorkersAndLoad() {
        var view = ClusterView()
        var a = Self.worker("aa", "alpha")
        a.inFlight = 2
        view.apply(
            .snapshot(
                ClusterSnapshot(
                    seq: 10, workers: [a], queued: ["sky.scan": 3], inFlight: 2, counters: BrokerCounters())))
        #expect(view.seq == 10 && view.queued == 3 && view.inFlight == 2 && view.snapshots == 1)
        view.apply(.event(SkyEvent(seq: 11, event: .workerConnected, time: "", worker: Self.worker("bb", "beta"))))
        #expect(view.sortedWorkers.map(\.name) == ["alpha", "beta"])
        #expect(view.workers["bb"]?.inFlight == 0 && view.workers["bb"]?.completed == 0)
        var loaded = Self.worker("bb", "beta")
        loaded.inFlight = 4
        loaded.completed = 17
        loaded.lastHeardMilliseconds = 120
        let stats = BrokerStats(
            workers: 2, capacity: 8, queued: 0, inFlight: 4, completed: 40, completedPerSecond: 12.5, failed: 3)
        view.apply(
            .event(
                SkyEvent(
                    seq: 12, event: .brokerStats, time: "", workers: [loaded, Self.worker("zz", "ghost")], stats: stats)
            ))
        #expect(view.workers["bb"] == loaded)
        #expect(view.workers["zz"] == nil, "stats never add a worker that did not connect")
        #expect(view.tasksPerSecond == 12.5 && view.completed == 40 && view.failed == 3 && view.queued == 0)
        view.apply(.event(SkyEvent(seq: 13, event: .workerDraining, time: "", worker: a)))
        #expect(view.draining == ["aa"])
        view.apply(.event(SkyEvent(seq: 14, event: .workerDisconnected, time: "", worker: a, reason: .graceful)))
        #expect(view.sortedWorkers.map(\.name) == ["beta"])
        #expect(view.draining.isEmpty && view.seq == 14)
    }
}
