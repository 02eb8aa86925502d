import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// Durable jobs on real processes: a real broker with a real SQLite journal in a temporary
    /// state directory, killed with SIGKILL and started again on it.
    @Suite("Durable jobs: submit, read from another process, broker and worker deaths")
    struct JobTests {
        /// A fresh state directory, removed afterwards.
        final class StateDirectory: Sendable {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("sky-state-\(UUID().uuidString)")
                .path
            var journal: String { path + "/jobs.sqlite" }
            var arguments: [String] { ["--state-dir", path] }
            deinit { try? FileManager.default.removeItem(atPath: path) }
        }

        @Test func aJobSubmittedByOneClientIsReadByAnotherAfterTheFirstClosed() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1")
            let first = try await SkyClient(broker: cluster.clients)
            let job = try await first.submit(EchoTask(message: "kept"))
            await first.close()
            #expect(job.id.description.count == 26)

            let second = try await SkyClient(broker: cluster.clients)
            let id = try #require(JobID(job.id.description), "the printed id parses back")
            let result = try await second.result(of: id, as: EchoTask.self)
            #expect(result.message == "kept")
            #expect(try await second.status(of: id) == .succeeded(attempt: 1))
            let unknown = JobID(bytes: [UInt8](repeating: 7, count: 16))!
            #expect(try await second.status(of: unknown) == .unknown)
            await #expect(throws: SkyError.self) { _ = try await second.result(of: unknown, as: EchoTask.self) }
            await second.close()
            await cluster.stop()
        }

        /// One job of the soak: what was submitted, so its result can be checked.
        enum SoakTask: Sendable {
            case scan(ScanTask)
            case sleep(SleepTask)
        }

        /// The issue's acceptance run: jobs (scans and sleeps, some delayed 2 s, mixed
        /// priorities) submitted by a client that then closes; the broker killed with SIGKILL
        /// twice and started again on its journal, a worker killed once; a new client fetches
        /// every result. None is lost or wrong, and the executions beyond one (each job's
        /// attempts) are exactly the jobs the broker found running in its journal when it
        /// started again plus those its lost worker held.
        @Test(.timeLimit(.minutes(3))) func jobsSurviveTwoBrokerKillsAndAWorkerKill() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments + TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(name: "doomed", capacity: 16)
            _ = try await cluster.startWorker(name: "steady", capacity: 16)
            let count = Int(10_000 / timingScale)
            let tasks: [SoakTask] = (0..<count).map { index in
                index % 2 == 0
                    ? .scan(ScanTask(sector: index, size: 32)) : .sleep(SleepTask(milliseconds: index % 7, tag: index))
            }
            let priorities: [JobPriority] = [.low, .normal, .high, .urgent]
            func options(_ index: Int) -> JobOptions {
                JobOptions(delay: index % 10 == 0 ? .seconds(2) : nil, priority: priorities[index % 4])
            }

            // Submitting, with the broker killed a third of the way through.
            let submitter = try await SkyClient(broker: cluster.clients)
            let submitted = Locked(0)
            let killer = Task {
                try await eventually("a third submitted", timeout: .seconds(60)) {
                    submitted.withLock { $0 } >= count / 3
                }
                cluster.broker.killNow()
                try await cluster.restartBroker()
            }
            let ids = try await withThrowingTaskGroup(of: (Int, JobID).self) { group in
                var ids = [JobID?](repeating: nil, count: count)
                var next = 0
                func add() {
                    let index = next
                    next += 1
                    group.addTask {
                        let id: JobID
                        switch tasks[index] {
                        case .scan(let task): id = try await submitter.submit(task, options: options(index)).id
                        case .sleep(let task): id = try await submitter.submit(task, options: options(index)).id
                        }
                        submitted.withLock { $0 += 1 }
                        return (index, id)
                    }
                }
                while next < min(256, count) { add() }
                while let (index, id) = try await group.next() {
                    ids[index] = id
                    if next < count { add() }
                }
                return ids.map { $0! }
            }
            try await killer.value
            await submitter.close()
            #expect(Set(ids).count == count, "one job per submit, also for submits resent across the kill")

            // Running: a worker and then the broker die while jobs run.
            let watcher = try await SkyClient(broker: cluster.clients)
            try await eventually("a tenth done", timeout: .seconds(60)) {
                try await watcher.status(of: ids[count / 10]).isFinished
            }
            worker.killNow()
            try await eventually("the broker noticed the lost worker", timeout: .seconds(20)) {
                cluster.broker.errorText.contains("worker disconnected")
            }
            try await eventually("half done", timeout: .seconds(60)) {
                try await watcher.status(of: ids[count / 2]).isFinished
            }
            await watcher.close()
            cluster.broker.killNow()
            try await cluster.restartBroker()

            // A new client fetches everything.
            let reader = try await SkyClient(broker: cluster.clients)
            let attempts = try await withThrowingTaskGroup(of: Int.self) { group in
                var total = 0
                for (index, id) in ids.enumerated() {
                    group.addTask {
                        switch tasks[index] {
                        case .scan(let task):
                            let report = try await reader.result(of: id, as: SectorReport.self)
                            #expect(try report == SectorScanner.scan(task), "job \(index)")
                        case .sleep(let task):
                            #expect(try await reader.result(of: id, as: SleepTask.self) == task, "job \(index)")
                        }
                        guard case .succeeded(let attempt) = try await reader.status(of: id) else {
                            Issue.record("job \(index) did not succeed")
                            return 0
                        }
                        return attempt
                    }
                    if index >= 256 { total += try await group.next() ?? 0 }
                }
                return try await group.reduce(total) { $0 + $1 }
            }
            let extra = attempts - count
            // What the brokers found: jobs running in the journal at each start, and the lost
            // worker's deliveries.
            let logs = cluster.brokerLogs
            let runningAtRestart = logs.map { Self.sum(of: "running", in: $0, after: "unfinished jobs taken up again") }
            let requeued = logs.map { Self.sum(of: "requeued", in: $0, after: "worker disconnected") }
            print(
                "jobs soak: \(count) jobs, \(extra) executions beyond one; running at the restarts \(runningAtRestart), requeued from the lost worker \(requeued)"
            )
            #expect(extra == runningAtRestart.reduce(0, +) + requeued.reduce(0, +))
            #expect(runningAtRestart.count == 3 && runningAtRestart[1] > 0, "jobs were running at the second kill")
            await reader.close()
            await cluster.stop()
        }

        /// Sums `name=N` over the log lines that contain `marker`.
        static func sum(of name: String, in log: String, after marker: String) -> Int {
            log.split(separator: "\n").filter { $0.contains(marker) }.reduce(0) { total, line in
                guard let range = line.range(of: "\(name)=") else { return total }
                return total + (Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0)
            }
        }
    }
}
