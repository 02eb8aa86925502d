import Foundation
import Logging
import Sky
import SkyBrokerKit
import SkyTestSupport
import SkyWorkerKit
import Synchronization
import Testing

/// A job whose handler reports progress and log lines, then waits until the test lets it end.
struct ReportingTask: SkyTask {
    static let service = "test.reporting"
    typealias Result = Int
    var lines: Int
}

/// Lets handlers that wait on it go on, once.
final class Gate: Sendable {
    private let opened: AsyncStream<Void>
    private let open: AsyncStream<Void>.Continuation

    init() {
        (opened, open) = AsyncStream.makeStream(of: Void.self)
    }

    func wait() async {
        for await _ in opened { return }
    }

    func release() {
        open.finish()
    }

    /// A worker's system whose `ReportingTask` handler says "halfway" at 0.5, logs its lines,
    /// one line of 10 MB and a message of 10 MB (both cut), waits for this gate, then says
    /// "done" at 1.
    func system(name: String) async -> ScanSystem {
        let system = ScanSystem(name: name, capacity: 2)
        await system.registerWithContext(ReportingTask.self) { task, context in
            context.progress(0.5, "halfway")
            for index in 0..<task.lines { context.log("line \(index)") }
            context.log(String(repeating: "x", count: 10 << 20))
            context.progress(0.5, String(repeating: "m", count: 10 << 20))
            context.progress(0.5, "halfway")
            await self.wait()
            context.progress(1, "done")
            return task.lines
        }
        return system
    }
}

extension InProcessSuite {
    /// docs/jobs.md, "Progress and logs": what a job's handler reports is read while it runs
    /// (`details(of:)`, a `job.progress` event), and after it ended, from the journal, also
    /// by a broker started afresh on it.
    @Suite("A job's progress and log lines, while it runs, after it ended, after a restart")
    struct JobProgressRunTests {
        @Test func aJobsProgressAndLogAreReadWhileItRunsAndAfterItEndedAcrossARestart() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-progress-\(UUID())")
            defer { try? FileManager.default.removeItem(at: state) }
            let gate = Gate()
            let cluster = try await InProcessCluster.start { $0.stateDirectory = state.path }
            try await cluster.startWorker(await gate.system(name: "reporter"))
            var configuration = SkyClient.Configuration()
            configuration.events = cluster.events
            let sky = try await SkyClient(broker: cluster.clients, configuration: configuration)
            let subscribed = Gate()
            let watching = Task { () -> SkyEvent? in
                for try await element in sky.events() {
                    switch element {
                    case .snapshot: subscribed.release()  // the subscription is live
                    case .event(let event) where event.event == .jobProgress: return event
                    default: break
                    }
                }
                return nil
            }
            await subscribed.wait()
            let job = try await sky.submit(ReportingTask(lines: 150))

            let progressEvent = try await value(of: watching, within: .seconds(20), "a job.progress event")
            #expect(progressEvent?.task?.requestID == job.id.description && progressEvent?.task?.progress == 0.5)
            try await eventually("the job's lines reached the broker") {
                let details = try await sky.details(of: job.id)
                return details.log?.last?.hasPrefix("xxx") == true && details.progressMessage == "halfway"
            }
            let running = try await sky.details(of: job.id)
            #expect(running.state == "running" && running.progress == 0.5)
            let log = try #require(running.log)
            #expect(log.count == 100 && log.first == "line 51" && running.droppedLogLines == 51, "\(log.prefix(2))")
            #expect(log.last.map { $0.utf8.count <= 1024 && $0.hasSuffix("…") } == true, "the 10 MB line, cut")

            gate.release()
            #expect(try await job.value == 150)
            let ended = try await sky.details(of: job.id)
            #expect(ended.state == "succeeded" && ended.progress == 1 && ended.progressMessage == "done")
            #expect(ended.log == log)
            await sky.close()
            await cluster.stop()

            // A broker started afresh on the same journal reads the same.
            let again = try await InProcessCluster.start { $0.stateDirectory = state.path }
            let reader = try await SkyClient(broker: again.clients)
            let read = try await reader.details(of: job.id)
            #expect(read.progress == 1 && read.progressMessage == "done" && read.log == log)
            #expect(read.droppedLogLines == 51)
            await reader.close()
            await again.stop()
        }
    }
}

/// A job whose handler fails with an error that writes terminal escapes.
struct EscapingFailure: SkyTask {
    static let service = "test.escaping"
    typealias Result = Int

    struct Failure: Error, CustomStringConvertible {
        var description: String { "bad \u{1B}]0;title\u{07} error\r\nline2 \u{1B}[31mred" }
    }
}

extension IntegrationSuite {
    @Suite("skyctl jobs show: a job's progress and log lines")
    struct JobProgressShowTests {
        /// What a handler wrote into its error's message reaches `skyctl jobs show` and `jobs
        /// list` without its control characters: printed raw, they would drive the terminal.
        @Test func skyctlPrintsNoControlCharactersFromAJobsError() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            let system = ScanSystem(name: "escaping", capacity: 1)
            await system.register(EscapingFailure.self) { _ in throw EscapingFailure.Failure() }
            let worker = SkyWorker(
                configuration: .init(broker: cluster.workers), system: system, logger: Logger(label: "escaping"))
            let running = Task { try await worker.run() }
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let job = try await sky.submit(EscapingFailure(), options: JobOptions(retry: .never))
            await #expect(throws: SkyError.self) { _ = try await job.value }
            for arguments in [["jobs", "show", job.id.description], ["jobs", "list"]] {
                let process = try SkyProcess("skyctl", arguments + ["--broker", cluster.clients])
                #expect(try await process.waitForExit() == 0)
                let text = process.outputLines.joined(separator: "\n")
                #expect(text.contains("bad  ]0;title  error  line2  [31mred"), "\(arguments): \(text)")
                let controls = text.unicodeScalars.filter { $0 != "\n" && $0.properties.generalCategory == .control }
                #expect(controls.isEmpty, "\(arguments): \(controls.map(\.value))")
            }
            await sky.close()
            await cluster.stop()
        }

        /// `skyctl jobs show` prints a running job's progress and its log, last lines last.
        @Test func skyctlJobsShowPrintsARunningJobsProgressAndLog() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            let gate = Gate()
            let worker = SkyWorker(
                configuration: .init(broker: cluster.workers), system: await gate.system(name: "reporter"),
                logger: Logger(label: "reporter"))
            let running = Task { try await worker.run() }
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let job = try await sky.submit(ReportingTask(lines: 3))
            try await eventually("the job's lines reached the broker") {
                (try await sky.details(of: job.id).log?.count ?? 0) == 4
            }
            let process = try SkyProcess("skyctl", ["jobs", "show", job.id.description, "--broker", cluster.clients])
            #expect(try await process.waitForExit() == 0)
            let out = process.outputLines
            #expect(out.first == "\(job.id)  running (attempt 1, worker reporter)", "\(out)")
            #expect(out.contains { $0.hasPrefix("  progress    50 %: halfway (at 20") }, "\(out)")
            let logAt = try #require(out.firstIndex(of: "  log (last 4 lines):"), "\(out)")
            #expect(Array(out[(logAt + 1)...(logAt + 3)]) == ["    line 0", "    line 1", "    line 2"], "\(out)")
            gate.release()
            _ = try await job.value
            await sky.close()
            await cluster.stop()
        }
    }
}
