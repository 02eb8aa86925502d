import Foundation
import Sky
import SkyBrokerKit
import SkyJournal
import SkyTestSupport
import SkyWorkloads
import Testing

/// Runs `count` echo jobs and one that fails (sky.flaky failing every call) to their ends.
private func runJobs(_ count: Int, on sky: SkyClient) async throws {
    for index in 0..<count { _ = try await sky.submit(EchoTask(message: "\(index)")).value }
    let failing = try await sky.submit(FlakyTask(value: 1), options: JobOptions(retry: .never))
    await #expect(throws: SkyError.self) { _ = try await failing.value }
}

extension InProcessSuite {
    /// docs/jobs.md, "Operating": the counts of jobs skywatch and skyweb show count on across a
    /// broker's restart, from the journal.
    @Suite("The counts of jobs across a restart")
    struct JobTotalsRunTests {
        @Test func theCountsOfJobsCountOnAfterARestart() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            let first = try await InProcessCluster.start { $0.stateDirectory = state.path }
            try await first.startWorker(name: "counted", capacity: 2, flakyEvery: 1)
            let sky = try await SkyClient(broker: first.clients)
            try await runJobs(3, on: sky)
            let before = try #require(try await first.snapshot().jobs)
            #expect(before.submitted == 4 && before.succeeded == 3 && before.failed == 1, "\(before)")
            await sky.close()
            await first.stop()

            let second = try await InProcessCluster.start { $0.stateDirectory = state.path }
            #expect(try await second.snapshot().jobs?.succeeded == 3, "read back at the start")
            try await second.startWorker(name: "counted", capacity: 2, flakyEvery: 1)
            let again = try await SkyClient(broker: second.clients)
            try await runJobs(2, on: again)
            let after = try #require(try await second.snapshot().jobs)
            #expect(after.submitted == 7 && after.succeeded == 5 && after.failed == 2, "\(after)")
            await again.close()
            await second.stop()
        }
    }
}

extension IntegrationSuite {
    @Suite("The counts of jobs across kill -9")
    struct JobTotalsKillTests {
        /// A broker killed after its journal saved the counts (within its maintenance interval of
        /// the last end) starts again from them.
        @Test func theCountsOfJobsSurviveAKillOnceSaved() async throws {
            let state = JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "counted", capacity: 2, extraArguments: ["--flaky-every", "1"])
            let sky = try await SkyClient(broker: cluster.clients)
            try await runJobs(3, on: sky)
            // Read from the journal while the broker runs (WAL: a reader beside the writer).
            try await eventually("the counts saved") {
                (try? SQLiteJobStore(path: state.journal).totals()) == JobTotals(submitted: 4, succeeded: 3, failed: 1)
            }
            cluster.broker.killNow()
            _ = try await cluster.broker.waitForExit()
            try await cluster.restartBroker()
            try await eventually("the counts read back") {
                let jobs = try? await cluster.snapshot().jobs
                return jobs?.submitted == 4 && jobs?.succeeded == 3 && jobs?.failed == 1
            }
            await sky.close()
            await cluster.stop()
        }
    }
}
