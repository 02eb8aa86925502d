import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension SecondLineSuite {
    /// What the command-line tools promise beyond their flags: skyscan's exit code tells a
    /// script whether the scan was good, and skywatch draws its table on a real terminal.
    @Suite("Command-line tools: exit codes and the terminal table")
    struct ToolOutcomeTests {
        static func summary(_ scan: SkyProcess) throws -> [String: Any] {
            let line = try #require(scan.outputLines.last { $0.hasPrefix("{") }, "skyscan --json printed a summary")
            return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        }

        /// A worker that cannot start (here: pointed at the broker's clients port) says why in
        /// one line naming the program and exits 1: the documented worker template
        /// (sky-example-worker) once ended with "Fatal error: Error raised at top level", a
        /// backtrace and exit 132, and skyworker with ArgumentParser's "Error: ...".
        @Test(arguments: ["sky-example-worker", "skyworker"])
        func aWorkerThatCannotStartSaysWhyInOneLineAndExits1(_ program: String) async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let worker = try cluster.track(SkyProcess(program, ["--broker", cluster.clients]))
            #expect(try await worker.waitForExit(timeout: .seconds(60)) == 1, "\(worker.errorText)")
            let said = worker.errorText.split(separator: "\n").filter { $0.hasPrefix("\(program): ") }
            #expect(
                said.count == 1
                    && said[0].contains("the broker refused this worker: this is the broker's clients endpoint"),
                "\(worker.errorText)")
            #expect(!worker.errorText.contains("Fatal error") && !worker.errorText.contains("Error: "))
        }

        /// skyscan exits 1 when scans fail (here: no worker serves sky.scan).
        @Test func skyscanExitsNonZeroWhenScansFail() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--no-workers-grace", "0.2"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo-only", extraArguments: ["--workloads", "sky.echo"])
            let scan = try SkyProcess(
                "skyscan", ["--broker", cluster.clients, "--sectors", "3", "--size", "16", "--attempts", "1", "--json"])
            #expect(try await scan.waitForExit() == 1)
            let summary = try Self.summary(scan)
            #expect(summary["failed"] as? Int == 3, "\(summary)")
            #expect(summary["completed"] as? Int == 0)
        }

        /// skyscan --verify exits 1 when a worker returns a wrong result, and counts it.
        @Test func skyscanVerifyExitsNonZeroOnAMismatch() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            // A worker from the protocol doc that answers every scan with sector 0's report.
            let report = try JSONEncoder().encode(SectorScanner.scan(ScanTask(sector: 0, size: 16)))
            let liar = try await HungWorker(
                broker: cluster.workers, services: [ScanTask.service], capacity: 8, respond: { _ in Array(report) })
            defer { Task { await liar.close() } }
            try await cluster.waitForWorkers(1)
            let scan = try SkyProcess(
                "skyscan", ["--broker", cluster.clients, "--sectors", "3", "--size", "16", "--verify", "--json"])
            #expect(try await scan.waitForExit() == 1)
            let summary = try Self.summary(scan)
            #expect(summary["completed"] as? Int == 3, "\(summary)")
            #expect(summary["mismatches"] as? Int == 2, "sectors 1 and 2 got sector 0's report: \(summary)")
        }

        /// skywatch's table, drawn on a real pseudo-terminal (`script`): the header, a row per
        /// worker with its name, and the row gone once the worker left.
        @Test func skywatchDrawsItsTableOnATerminal() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(name: "tty-worker", capacity: 3)
            let watch = try cluster.track(
                SkyProcess.onTerminal(
                    "skywatch", ["--broker", cluster.clients, "--events", cluster.events], name: "skywatch-tty"))
            try await watch.waitUntil(timeout: .seconds(20)) { lines in
                lines.contains { $0.contains("tty-worker") } && lines.contains { $0.contains("WORKER") }
            }
            worker.signal(SIGKILL)
            let drawnBefore = watch.outputLines.count
            // Redrawn in place once the broker dropped it: no worker rows left.
            try await watch.waitUntil(timeout: .seconds(20)) { lines in
                lines.count > drawnBefore && lines[drawnBefore...].contains { $0.contains("(no workers connected)") }
            }
            // SIGTERM to skywatch itself (script's child): it draws its last table and exits 0.
            let stop = try SkyProcess(
                program: URL(fileURLWithPath: "/usr/bin/pkill"), ["-TERM", "-P", "\(watch.pid)"], name: "pkill")
            #expect(try await stop.waitForExit() == 0)
            #expect(try await watch.waitForExit() == 0, "\(watch.outputLines.suffix(5))")
        }

        /// On a terminal, a departed worker stays listed under RECENT DEPARTURES with its reason,
        /// and a broker that goes silent gets a banner instead of a table that only looks stale;
        /// without a terminal the same silence is one line on stderr.
        @Test func skywatchListsDeparturesAndSaysWhenTheBrokerIsGone() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(name: "leaving-worker", capacity: 1)
            let arguments = ["--broker", cluster.clients, "--events", cluster.events]
            let table = try cluster.track(SkyProcess.onTerminal("skywatch", arguments, name: "skywatch-banner"))
            let lines = try cluster.track(SkyProcess("skywatch", arguments, name: "skywatch-silence"))
            try await table.waitUntil(timeout: .seconds(20)) { $0.contains { $0.contains("leaving-worker") } }
            try await lines.waitForLine { $0.contains("leaving-worker") }
            worker.signal(SIGKILL)
            let departed = try await table.waitForLine(timeout: .seconds(20)) { $0.contains("leaving-worker left: ") }
            #expect(departed.contains("left: expired") || departed.contains("left: unreachable"), "\(departed)")
            cluster.broker.signal(SIGKILL)
            let banner = try await table.waitForLine(timeout: .seconds(20)) { $0.contains("BROKER UNREACHABLE since") }
            #expect(banner.contains("the figures below are from then"), "\(banner)")
            let silence = try await lines.waitForLine(onStandardError: true, timeout: .seconds(20)) {
                $0.contains("broker unreachable since")
            }
            #expect(silence.contains(cluster.clients), "\(silence)")
            // A time a person reads: "for 4.0 s", not "for 4.013318183 seconds".
            #expect(silence.wholeMatch(of: /.* for \d+\.\d s/) != nil, "\(silence)")
            lines.signal(SIGTERM)
            #expect(try await lines.waitForExit() == 0)
        }

        /// Per service, the table shows the queue, the rate, failures and p50/p99 latency of the
        /// last second, broker-made failures included; the piped lines carry the same figures.
        @Test func skywatchShowsEachServicesQueueRateFailuresAndLatency() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--flaky-every", "2"])
            let arguments = ["--broker", cluster.clients, "--events", cluster.events]
            // A terminal narrower than the table: each line is cut to it, not wrapped.
            let table = try cluster.track(
                SkyProcess.onTerminal("skywatch", arguments, name: "skywatch-services", columns: 70))
            let lines = try cluster.track(SkyProcess("skywatch", arguments, name: "skywatch-service-lines"))
            try await table.waitUntil(timeout: .seconds(20)) { $0.contains { $0.contains("w1") } }
            let sky = try await SkyClient(broker: cluster.clients)
            // Calls until a stats period has both: echoes answered, and flaky failures.
            let load = Task {
                var index = 0
                while !Task.isCancelled {
                    _ = try? await sky.scan(EchoTask(message: "\(index)"))
                    _ = try? await sky.scan(FlakyTask(value: index), options: ScanOptions(retry: .never))
                    index += 1
                }
            }
            defer { load.cancel() }
            let echo = try await table.waitForLine(timeout: .seconds(20)) {
                $0.hasPrefix("sky.echo ") && $0.contains(" ms")
            }
            let flaky = try await table.waitForLine(timeout: .seconds(20)) {
                // SERVICE QUEUED RATE/S FAILED P50 P99: some failed, with latencies.
                let cells = $0.split(separator: " ")
                return $0.hasPrefix("sky.flaky ") && $0.contains(" ms") && cells.count >= 4 && cells[3] != "0"
            }
            print("skywatch services:\n\(echo)\n\(flaky)")
            let visible = table.outputLines.map { $0.replacing(/\u{1B}\[[0-9;]*[A-Za-z]/, with: "") }
            #expect(visible.allSatisfy { $0.count <= 70 }, "\(visible.filter { $0.count > 70 })")
            #expect(visible.contains { $0.hasPrefix("WORKER ") && $0.hasSuffix("…") }, "the workers' header is cut")
            try await lines.waitForLine { $0.contains("broker.stats") && $0.contains("sky.echo:queued=0,rate=") }
            #expect(
                try await table.waitUntil { $0.contains { $0.hasPrefix("SERVICE ") && $0.contains("P99") } }.count > 0)
            // A paused service is named so, in both forms, even with nothing of it waiting.
            #expect(try await sky.pause(service: "sky.held"))
            _ = try await table.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("sky.held (paused) ") }
            try await lines.waitForLine {
                $0.contains("broker.stats") && $0.contains("sky.held:queued=0,") && $0.contains(",paused")
            }
            load.cancel()
            await sky.close()
        }

        /// Without a terminal and without --json, skywatch prints one line per event: time,
        /// number, kind, then the worker, the reason and what it held.
        @Test func skywatchPrintsOneLinePerEventWithoutATerminal() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try cluster.track(
                SkyProcess(
                    "skywatch", ["--broker", cluster.clients, "--events", cluster.events], name: "skywatch-lines"))
            try await watch.waitForLine { $0.contains("broker.hello") || $0.contains("workers=0") }
            let worker = try await cluster.startWorker(name: "line-worker", capacity: 2)
            let joined = try await watch.waitForLine { $0.contains("worker.connected line-worker") }
            #expect(joined.contains("capacity=2"), "\(joined)")
            worker.signal(SIGKILL)
            let left = try await watch.waitForLine { $0.contains("worker.disconnected line-worker") }
            #expect(left.contains("reason="), "\(left)")
            watch.signal(SIGTERM)
            #expect(try await watch.waitForExit() == 0)
        }

        /// skyscan on a terminal: a progress bar on stderr while it runs, then the summary as a
        /// table ending in "result OK" (and exit 0) when every scan matched a local one.
        @Test func skyscanPrintsProgressAndASummaryTableOnATerminal() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "scanner", capacity: 2)
            let scan = try SkyProcess.onTerminal(
                "skyscan", ["--broker", cluster.clients, "--sectors", "20", "--size", "16", "--verify"],
                name: "skyscan-tty")
            #expect(try await scan.waitForExit() == 0)
            let text = scan.outputLines.joined(separator: "\n")
            #expect(text.contains("20/20"), "the progress bar reached the end: \(text)")
            #expect(text.contains("completed    20"), "\(text)")
            #expect(text.contains("mismatches   0"), "\(text)")
            #expect(text.contains("result       OK"), "\(text)")
        }
    }
}
