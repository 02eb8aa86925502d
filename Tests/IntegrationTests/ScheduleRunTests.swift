import Foundation
import Sky
import SkyJournal
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Schedules on a real broker with a real SQLite journal, killed and restarted while a
    /// 1-second schedule runs.
    @Suite("Schedules on a real broker: each tick fires once across kills and restarts")
    struct ScheduleRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// A 1-second schedule (every missed tick caught up, overlapping runs allowed) while
        /// the broker is `kill -9`ed, stopped with SIGTERM and `kill -9`ed again: afterwards the
        /// journal holds one job per tick from the first to the last, none twice, none missing.
        @Test(.timeLimit(.minutes(2)))
        func aOneSecondScheduleFiresEachTickOnceAcrossKillsAndARestart() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.echo"])
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.schedule(
                name: "beat", every: .seconds(1), task: EchoTask(message: "tick"), overlap: .allow,
                catchUp: .all(limit: 100))
            /// Waits until the schedule made `more` jobs beyond those seen so far.
            var seen = 0
            func waitForTicks(_ more: Int) async throws {
                let target = seen + more
                try await eventually("\(target) scheduled jobs", timeout: .seconds(20)) {
                    (try? await sky.jobs(service: EchoTask.service, limit: 1000).count) ?? 0 >= target
                }
                seen = try await sky.jobs(service: EchoTask.service, limit: 1000).count
            }
            try await waitForTicks(3)
            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await waitForTicks(3)
            cluster.broker.signal(SIGTERM)
            #expect(try await cluster.broker.waitForExit() == 0)
            try await cluster.restartBroker()
            try await waitForTicks(3)
            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await waitForTicks(2)
            let listed = try await sky.schedules()
            #expect(listed.map(\.spec.name) == ["beat"])
            #expect(listed.first?.lastJob != nil)
            await sky.close()
            await cluster.stop()

            let journal = try SQLiteJobStore(path: state.journal)
            let ticks = try journal.list(state: nil, service: EchoTask.service, limit: 1000).compactMap { job in
                job.idempotencyKey.flatMap { $0.split(separator: "/").last }.flatMap { Int64($0) }
            }.sorted()
            let first = try #require(ticks.first)
            let last = try #require(ticks.last)
            print("a 1 s schedule across two kills and a restart: \(ticks.count) ticks, \(first) to \(last)")
            #expect(Set(ticks).count == ticks.count, "no tick twice")
            #expect(ticks == Array(stride(from: first, through: last, by: 1000)), "no tick missing")
            #expect(ticks.count >= 11)
        }
    }
}
