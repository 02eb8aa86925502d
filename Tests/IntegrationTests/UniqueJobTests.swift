import Foundation
import Sky
import SkyJournal
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Unique jobs on a real broker with a real SQLite journal.
    @Suite("Unique jobs on a real broker: one job per key while it waits or runs")
    struct UniqueJobTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// 1,000 concurrent submits with one key, held while running: every submit returns the
        /// same job, one job runs, and the journal holds one; once it ended, the key makes a
        /// new job. A broker restarted meanwhile knows the key is held.
        @Test(.timeLimit(.minutes(2)))
        func aThousandConcurrentSubmitsWithOneKeyMakeOneJob() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", capacity: 4, extraArguments: ["--workloads", "sky.sleep"])
            let sky = try await SkyClient(broker: cluster.clients)
            let options = {
                var options = JobOptions.besideOtherSuites
                options.idempotencyKey = "nightly-report"
                options.unique = .whileRunning
                return options
            }()
            let ids = try await withThrowingTaskGroup(of: JobID.self) { group in
                for tag in 0..<1000 {
                    group.addTask {
                        try await sky.submit(SleepTask(milliseconds: 1500, tag: tag), options: options).id
                    }
                }
                return try await group.reduce(into: Set<JobID>()) { $0.insert($1) }
            }
            #expect(ids.count == 1, "\(ids.count) jobs for one key")
            let job = try #require(ids.first)
            // Held across a restart: the key is on disk with the job.
            cluster.broker.killNow()
            try await cluster.restartBroker()
            #expect(try await sky.submit(SleepTask(milliseconds: 1, tag: -1), options: options).id == job)
            let result = try await sky.result(of: job, as: SleepTask.self)
            #expect(result.milliseconds == 1500)
            let after = try await sky.submit(SleepTask(milliseconds: 1, tag: -2), options: options)
            #expect(after.id != job, "ended, the job gave up its key")
            #expect(try await after.value == SleepTask(milliseconds: 1, tag: -2))
            await sky.close()
            await cluster.stop()

            let journal = try SQLiteJobStore(path: state.journal)
            let jobs = try journal.list(state: nil, service: SleepTask.service, limit: 1000)
            #expect(jobs.count == 2, "\(jobs.map(\.idempotencyKey))")
            #expect(jobs.allSatisfy { $0.idempotencyKey == nil }, "both ended, both gave up the key")
        }

        /// Held while queued: a second submit while the first waits returns it; once it was
        /// sent to a worker, the key makes a new job that waits behind it.
        @Test(.timeLimit(.minutes(1)))
        func aKeyHeldWhileQueuedIsGivenUpWhenTheJobIsSent() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            let sky = try await SkyClient(broker: cluster.clients)
            let options = JobOptions(idempotencyKey: "refresh", unique: .whileQueued)
            let first = try await sky.submit(SleepTask(milliseconds: 1000, tag: 1), options: options)
            #expect(try await sky.submit(SleepTask(milliseconds: 1000, tag: 2), options: options).id == first.id)
            _ = try await cluster.startWorker(name: "w1", capacity: 1, extraArguments: ["--workloads", "sky.sleep"])
            try await eventually("the first job running", timeout: .seconds(10)) {
                if case .running = try await sky.status(of: first.id) { return true }
                return false
            }
            let second = try await sky.submit(SleepTask(milliseconds: 10, tag: 3), options: options)
            #expect(second.id != first.id, "sent, the first gave up its key")
            #expect(try await sky.submit(SleepTask(milliseconds: 10, tag: 4), options: options).id == second.id)
            #expect(try await second.value == SleepTask(milliseconds: 10, tag: 3))
            await sky.close()
            await cluster.stop()
        }

        /// Held for a time: within it a submit returns the first job, also after it ended and
        /// the broker was `kill -9`ed (the store answers); after it, the key makes a new job.
        @Test(.timeLimit(.minutes(1)))
        func aKeyHeldForATimeHoldsAcrossAnEndAndARestart() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.echo"])
            let sky = try await SkyClient(broker: cluster.clients)
            let options = JobOptions(idempotencyKey: "digest", unique: .for(.seconds(4)))
            let submitted = ContinuousClock.now
            let first = try await sky.submit(EchoTask(message: "one"), options: options)
            #expect(try await first.value == EchoTask(message: "one"))
            cluster.broker.killNow()
            try await cluster.restartBroker()
            #expect(try await sky.submit(EchoTask(message: "two"), options: options).id == first.id)
            // The scenario is the time passing: the key holds 4 s from the first submit.
            try await Task.sleep(until: submitted + .seconds(4.5))
            let third = try await sky.submit(EchoTask(message: "three"), options: options)
            #expect(third.id != first.id, "its time passed, the key makes a new job")
            #expect(try await third.value == EchoTask(message: "three"))
            #expect(try await sky.submit(EchoTask(message: "four"), options: options).id == third.id)
            await sky.close()
            await cluster.stop()
        }
    }
}
