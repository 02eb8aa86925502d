import Foundation
import Sky
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Bulk actions on a real broker with a real SQLite journal, from skyctl: 5,000 failed jobs
    /// counted by a dry run, retried in one command (the same count), and each run again; the
    /// dead-letter view; a command without a filter refused.
    @Suite("Bulk actions: 5,000 failed jobs retried by filter in one command")
    struct BulkActionRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        static let jobs = 5_000

        @Test(.timeLimit(.minutes(2)))
        func fiveThousandFailedJobsAreCountedThenRetriedInOneCommand() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            // sky.flaky fails every call on this worker.
            _ = try await cluster.startWorker(
                name: "w1", capacity: 64, extraArguments: ["--workloads", "sky.flaky,sky.echo", "--flaky-every", "1"])
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", ["jobs"] + arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            let sky = try await SkyClient(broker: cluster.clients)
            let failed = JobFilter(state: .failed, service: FlakyTask.service)
            func failedCount() async throws -> Int { try await sky.bulk(.count, failed).matched }

            // 5,000 jobs that fail once each, and one that succeeds.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<50 {
                    group.addTask {
                        for index in stride(from: lane, to: Self.jobs, by: 50) {
                            var options = JobOptions.besideOtherSuites
                            options.retry = .never
                            _ = try await sky.submit(FlakyTask(value: index), options: options)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let good = try await sky.submit(EchoTask(message: "fine"))
            _ = try await good.value
            try await eventually("5,000 jobs failed", timeout: .seconds(60)) { try await failedCount() == Self.jobs }

            // Without a filter, an action is refused before it reaches the broker.
            let unfiltered = try await skyctl(["bulk", "retry"])
            #expect(unfiltered.status == 64 && unfiltered.err.contains("--all to mean every job"), "\(unfiltered)")
            #expect(try await failedCount() == Self.jobs, "nothing was retried")

            // The dead letters, by error type.
            let view = try await skyctl(["failed", "--limit", "3"])
            #expect(view.status == 0 && view.out.first == "5000 failed jobs", "\(view)")
            #expect(view.out.count == 7, "the count, a type's header and row, a header and 3 jobs: \(view.out)")

            let arguments = ["bulk", "retry", "--state", "failed", "--service", FlakyTask.service]
            let dryRun = try await skyctl(arguments + ["--dry-run"])
            #expect(
                dryRun.status == 0 && dryRun.out.first == "5000 matching jobs (a retry would select them)", "\(dryRun)")
            #expect(try await failedCount() == Self.jobs, "a dry run changes nothing")
            let started = ContinuousClock.now
            let retried = try await skyctl(arguments)
            let took = ContinuousClock.now - started
            #expect(retried.status == 0 && retried.out.first == "retried 5000 of 5000 matching jobs", "\(retried)")
            print("skyctl jobs bulk retry of 5,000 failed jobs: \(took)\n\(retried.out.joined(separator: "\n"))")
            // Each ran again, as a new job, and failed again.
            try await eventually("the 5,000 new jobs failed too", timeout: .seconds(60)) {
                try await failedCount() == 2 * Self.jobs
            }
            #expect(try await sky.bulk(.count, JobFilter()).matched == 2 * Self.jobs + 1)
            // A bulk retry runs a job again once: the old ones find the jobs they made.
            let again = try await sky.bulk(.retry, failed)
            #expect(
                again.matched == 2 * Self.jobs && again.acted == Self.jobs && again.retriedBefore == Self.jobs,
                "\(again)")
            try await eventually("the 5,000 newest ran again", timeout: .seconds(60)) {
                try await failedCount() == 3 * Self.jobs
            }
            #expect(try await sky.bulk(.count, JobFilter()).matched == 3 * Self.jobs + 1, "5,000 more, not 10,000")

            let deleted = try await skyctl(["bulk", "delete", "--state", "failed", "--service", FlakyTask.service])
            #expect(deleted.out.first == "deleted 15000 of 15000 matching jobs", "\(deleted)")
            #expect(try await sky.status(of: good.id) == .succeeded(attempt: 1), "another job is left as it was")
            await sky.close()
            await cluster.stop()
        }
    }
}
