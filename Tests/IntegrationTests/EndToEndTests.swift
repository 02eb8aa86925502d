import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension IntegrationSuite {
    @Suite("End to end: real skybroker, skyworker, skywatch and skyscan processes")
    struct EndToEndTests {
        @Test func scansRunAcrossWorkersAndEventsTellWhoCameAndWent() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let first = try await cluster.startWorker(name: "worker-a", capacity: 3)
            _ = try await cluster.startWorker(name: "worker-b", capacity: 3)
            try await watch.waitForEvents { $0.filter { $0.event == .workerConnected }.count == 2 }

            // Through the library: every result equals the scan computed locally.
            let sky = try await SkyClient(broker: cluster.clients)
            let tasks = (0..<120).map { ScanTask(sector: 1000 + $0, size: 64) }
            let reports = try await sky.scanConcurrently(tasks)
            #expect(reports.count == tasks.count)
            for report in reports {
                #expect(report == (try SectorScanner.scan(ScanTask(sector: report.sector, size: 64))))
            }

            // Hundreds in flight from one client at once.
            let echoes = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<500 {
                    group.addTask {
                        let message = "echo \(index)"
                        return try await sky.scan(EchoTask(message: message)).message == message
                    }
                }
                return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
            }
            #expect(echoes == 500)

            // Both workers did work: the broker spread it.
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.workers.map(\.name).sorted() == ["worker-a", "worker-b"])
            #expect(snapshot.counters.requestsAccepted == 620)
            #expect(snapshot.counters.repliesSent >= 620)
            await sky.close()

            // Through skyscan, checking every result locally.
            let scan = try cluster.track(
                SkyProcess(
                    "skyscan",
                    [
                        "--broker", cluster.clients, "--sectors", "150", "--size", "48", "--concurrency", "32",
                        "--verify",
                        "--json",
                    ]))
            #expect(try await scan.waitForExit() == 0)
            let summaryLine = try #require(scan.outputLines.last)
            let summary = try #require(
                try JSONSerialization.jsonObject(with: Data(summaryLine.utf8)) as? [String: Any])
            #expect(summary["completed"] as? Int == 150)
            #expect(summary["failed"] as? Int == 0)
            #expect(summary["mismatches"] as? Int == 0)
            #expect((summary["tasksPerSecond"] as? Double ?? 0) > 0)

            // A worker that is stopped says goodbye; skywatch prints exactly one disconnect for it.
            first.signal(SIGTERM)
            #expect(try await first.waitForExit() == 0)
            let events = try await watch.waitForEvents { $0.contains { $0.event == .workerDisconnected } }
            let connected = events.filter { $0.event == .workerConnected }
            let disconnected = events.filter { $0.event == .workerDisconnected }
            #expect(connected.compactMap(\.worker?.name).sorted() == ["worker-a", "worker-b"])
            #expect(disconnected.count == 1)
            #expect(disconnected.first?.worker?.name == "worker-a")
            #expect(disconnected.first?.reason == .graceful)
            #expect(connected.first?.worker?.capacity == 3)
            #expect(
                connected.first?.worker?.services == ["sky.echo", "sky.flaky", "sky.gather", "sky.scan", "sky.sleep"])
            let seqs = events.map(\.seq)
            #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)

            await cluster.stop()
            #expect(!cluster.broker.isRunning)
        }

        @Test func aBusyEndpointStopsTheBrokerWithAClearMessage() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let second = try cluster.track(
                SkyProcess(
                    "skybroker",
                    [
                        "--clients", cluster.clients, "--workers", "tcp://127.0.0.1:*", "--events", "tcp://127.0.0.1:*",
                        "--state-dir", "none",
                    ]))
            #expect(try await second.waitForExit() == 1)
            #expect(
                second.errorText.contains("cannot bind the clients endpoint \(cluster.clients): Address already in use")
            )
            await cluster.stop()
        }

        /// A broker whose standard output nobody reads any more (a supervisor's pipe closed)
        /// goes on serving after its ready line: the write trapped (Foundation's FileHandle on
        /// EPIPE), and a filter's rule (exit 0 when the reader is gone) must not apply to a
        /// server.
        @Test func aBrokerWhoseOutputIsClosedStillServes() async throws {
            var ends: [Int32] = [0, 0]
            #expect(pipe(&ends) == 0)
            close(ends[0])  // nobody will read: the ready line meets EPIPE
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sky-closed-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let clients = "ipc://\(directory.path)/clients"
            let broker = Process()
            broker.executableURL = SkyProcess.binaries.appendingPathComponent("skybroker")
            broker.arguments = [
                "--clients", clients, "--workers", "ipc://\(directory.path)/workers", "--events",
                "ipc://\(directory.path)/events", "--state-dir", "none",
            ]
            broker.standardOutput = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
            broker.standardError = FileHandle.nullDevice
            try broker.run()
            defer { if broker.isRunning { kill(broker.processIdentifier, SIGKILL) } }
            let sky = try await SkyClient(broker: clients)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.workers.isEmpty && broker.isRunning, "it answers after its ready line failed")
            await sky.close()
        }

        /// The message of `error` if it is `invalidTask`; an issue recorded otherwise.
        static func invalidTaskMessage(_ error: SkyError?) -> String? {
            guard case .invalidTask(let message)? = error else {
                Issue.record("expected invalidTask, got \(String(describing: error))")
                return nil
            }
            return message
        }

        @Test(arguments: ["", "bad\nname", String(repeating: "s", count: 256)])
        func anInvalidServiceNameIsRefusedLocallyInsteadOfWaitingForever(service: String) async throws {
            // No broker at all: the call must fail before anything is sent, with the local check's
            // error (a call that went out would end in brokerUnreachable after seconds).
            let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
            let started = ContinuousClock.now
            let error = await #expect(throws: SkyError.self) { _ = try await sky.request(service: service, body: []) }
            guard let message = Self.invalidTaskMessage(error) else { return }
            #expect(message.contains("is not 1...255 bytes of UTF-8 without control characters"))
            #expect(ContinuousClock.now - started < .seconds(1))
            #expect(await sky.statistics.counters.attemptsSent == 0)
            await sky.close()
        }

        /// A schedule's interval of zero or less is refused naming it, before anything is sent
        /// (it said "an interval of 0 ms" for -5 s).
        @Test(arguments: [Duration.seconds(-5), .zero])
        func aScheduleOfNoIntervalIsRefusedNamingIt(interval: Duration) async throws {
            let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
            let error = await #expect(throws: SkyError.self) {
                try await sky.schedule(name: "beat", every: interval, task: EchoTask(message: "tick"))
            }
            guard let message = Self.invalidTaskMessage(error) else { return }
            #expect(message.contains("an interval of \(interval)"), "\(message)")
            #expect(await sky.statistics.counters.attemptsSent == 0)
            await sky.close()
        }

        /// A task the coder cannot encode fails at once with the coder's reason, and nothing is
        /// sent (there is no broker to send to).
        @Test func aTaskThatCannotBeEncodedFailsAtOnceAsInvalidTask() async throws {
            let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
            let error = await #expect(throws: SkyError.self) { _ = try await sky.scan(Measurement(value: .nan)) }
            guard let message = Self.invalidTaskMessage(error) else { return }
            #expect(message.contains("the task could not be encoded"), "\(message)")
            #expect(await sky.statistics.counters.attemptsSent == 0)
            await sky.close()
        }

        /// A reply that is not the task's result type (here sky.echo's echo of the task, read as
        /// a number) fails as invalidResult with the decoder's reason.
        @Test(arguments: ["skybroker", "skyworker", "skyscan", "skywatch"])
        func everyExecutableExplainsItself(executable: String) async throws {
            let process = try SkyProcess(executable, ["--help"])
            defer { process.killNow() }
            #expect(try await process.waitForExit() == 0)
            #expect(process.outputLines.joined(separator: "\n").contains("USAGE: \(executable)"))
        }
    }
}

/// A task sky.echo sends back as it came, with a result type the echo is not (the name of
/// Foundation's type too: test files that import Foundation say `IntegrationTests.Measurement`).
struct Measurement: SkyTask {
    static let service = EchoTask.service
    typealias Result = Int
    var value: Double
}
