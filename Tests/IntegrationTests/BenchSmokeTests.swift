import Foundation
import SkyTestSupport
import Testing

extension SecondLineSuite {
    /// The benchmark never runs in the test suite; this checks that it still works end to end.
    @Suite("skybench smoke test")
    struct BenchSmokeTests {
        /// skybench compiles the C baseline, measures a few hundred requests of Sky (the
        /// synchronous path, made for such a load: calls by completion handlers, each starting
        /// the next, and the echo inline on the worker's I/O thread) and of the
        /// baseline, prints its table and exits 0; its JSON report holds both systems' figures,
        /// their context switches per process, and Sky's typed path. The baseline runs with Sky's
        /// frame count (`--baseline-extra-frames 4`): its client checks that every reply came back
        /// with all 6 frames, and skybench that the client sent 6. It runs under `SCHED_BATCH`
        /// (`--baseline-scheduling batch`), as Sky's I/O threads do.
        @Test func skybenchMeasuresAFewHundredRequestsOfBothSystemsAndExitsZero() async throws {
            let run = try await Self.skybench(
                [
                    "--rounds", "1", "--workers", "1", "--payloads", "64", "--in-flight", "8",
                    "--latency-requests", "200", "--latency-warmup", "20", "--warmup", "0.05", "--measure", "0.3",
                    "--queue-memory", "500", "--scan-tasks", "0", "--free", "--baseline-extra-frames", "4",
                    "--worker-handlers", "inline", "--client-callers", "completion", "--baseline-scheduling", "batch",
                    "--syscall-tasks", "100",
                ], timeout: .seconds(100))
            #expect(run.status == 0, "skybench failed: \(run.errors)")
            let table = run.output
            #expect(table.contains("carry 4 extra frame(s) each (--baseline-extra-frames): as many as Sky's protocol"))
            #expect(table.contains("Sky / baseline"))
            // The baseline's programs ran under chrt --batch (each exec'd in place: its pids are
            // its own, so their switches below are counted).
            #expect(
                table.contains(
                    "Sky's I/O threads scheduled batch (SKY_IO_THREAD_SCHEDULING), the baseline's threads batch (--baseline-scheduling)"
                ))
            #expect(
                table.contains(
                    "handlers on the workers' I/O thread, inline (no task), calls on the client's I/O thread, by completion handlers"
                ), "\(table)")
            #expect(table.contains("Targets"))
            #expect(table.contains("Context switches per task"))
            #expect(table.contains("- context switches per task at 8 in flight"))
            // System calls per task of each process of both systems, after the timed tables
            // (perf is on the machines the suite runs on; without it the bench says so).
            if !table.contains("System calls per task: not counted, perf is missing") {
                #expect(table.contains("System calls per task (perf trace; 64 B, 8 in flight, 1 worker)"), "\(table)")
                for role in ["broker", "client", "worker"] {
                    #expect(table.contains("  \(role), Sky: ") && table.contains("  \(role), baseline: "), "\(role)")
                }
            }

            let report = try #require(run.json, "skybench wrote no JSON report")
            let json = try #require(try JSONSerialization.jsonObject(with: report) as? [String: Any])
            let samples = try #require(json["samples"] as? [[String: Any]])
            for system in ["sky", "baseline"] {
                let latency = try #require(
                    samples.first { $0["system"] as? String == system && $0["kind"] as? String == "latency" })
                let figures = try #require(latency["figures"] as? [String: Any])
                #expect(figures["tasks"] as? Int == 200, "\(system) latency: \(figures)")
                #expect((figures["p50"] as? Double ?? 0) > 0, "\(system) latency: \(figures)")
                let throughput = try #require(
                    samples.first { $0["system"] as? String == system && $0["kind"] as? String == "throughput" })
                let counted = try #require(throughput["figures"] as? [String: Any])
                #expect((counted["tasks"] as? Int ?? 0) > 0, "\(system) throughput: \(counted)")
                // Counts per process: the client, the broker and the worker each woke up at least
                // once while a few hundred tasks went through them.
                let switches = try #require(counted["switches"] as? [String: Int], "\(system): \(counted)")
                #expect(Set(switches.keys) == ["client", "broker", "worker-1"], "\(system): \(switches)")
                #expect(switches.values.allSatisfy { $0 > 0 }, "\(system): \(switches)")
                print(
                    "skybench smoke, \(system): latency p50 \(figures["p50"] ?? "-") us, \(counted["tasks"] ?? 0) tasks in 0.3 s at 8 in flight"
                )
            }
            // The typed path (scan of a Codable struct) at the same point, Sky only.
            #expect(table.contains("Sky's typed path"))
            #expect(table.contains("- typed scan CPU per task"))
            let typed = try #require(samples.first { $0["kind"] as? String == "typedThroughput" })
            #expect(typed["system"] as? String == "sky")
            let typedFigures = try #require(typed["figures"] as? [String: Any])
            #expect((typedFigures["tasks"] as? Int ?? 0) > 0, "typed: \(typedFigures)")
            let memory = try #require(json["queueMemory"] as? [String: Any])
            #expect(memory["queued"] as? Int == 500)
        }

        /// `--jobs` measures the durable jobs and, in the same round, the floor under "scan beside
        /// a durable load": the C chain alone and beside `client.c`'s paced load of fsync'd jobs.
        /// Both paced loads (Sky's from another process, and C's) must really have run.
        @Test(
            .disabled(
                if: SkyProcess.binaries.path.contains(".build-tsan"),
                "fsync'd submits one at a time and timed load phases for Sky and C: at ThreadSanitizer's speed they check nothing the jobs' own tests (JobTests, which run under it) do not"
            ))
        func skybenchJobsMeasuresSkyBesideADurableLoadAndTheFloorInC() async throws {
            let run = try await Self.skybench(
                [
                    "--jobs", "--smoke", "--rounds", "1", "--workers", "1", "--job-count", "300",
                ], timeout: .seconds(240))
            #expect(run.status == 0, "skybench --jobs failed: \(run.errors)")
            let table = run.output
            #expect(table.contains("beside 1000 jobs/s from another process ÷ alone: throughput"))
            #expect(table.contains("floor, C beside 1000 C jobs/s ÷ alone: throughput"))
            let report = try #require(run.json, "skybench wrote no JSON report")
            let json = try #require(try JSONSerialization.jsonObject(with: report) as? [String: Any])
            for key in [
                "scanAlone", "scanBesideOtherProcess", "otherProcessJobsRecorded", "baselineAlone",
                "baselineBesidePaced", "baselineP50Alone", "baselineP50BesidePaced", "baselinePacedJobs",
            ] {
                let values = try #require(json[key] as? [Double], "\(key) missing: \(json.keys.sorted())")
                #expect(values.count == 1 && values[0] > 0, "\(key): \(values)")
            }
            // The loads ran at about their rate (1,000 jobs a second), not a trickle.
            #expect((json["otherProcessJobsRecorded"] as? [Double])?.first ?? 0 > 200)
            #expect((json["baselinePacedJobs"] as? [Double])?.first ?? 0 > 200)
            // The schedules phase: its 100 schedules of a second (the smoke's tenth) fired. Only
            // that they fired, not how often: each second's firings wait for an fsync'd commit,
            // and beside another process's release build a run here counted 1 job a second in
            // the smoke's 1 s window. ScheduleTests check the firing itself.
            #expect(table.contains("100 of a second, firing"))
            #expect(
                (json["scheduledJobsPerSecond"] as? [Double])?.first ?? 0 > 0,
                "\(json["scheduledJobsPerSecond"] ?? "")")
            // The flows phase: chains ran, and each step cost something (not a negative median).
            #expect(table.contains("each further step, end → next start"))
            #expect(
                (json["chainStepMicroseconds"] as? [Double])?.first ?? 0 > 0, "\(json["chainStepMicroseconds"] ?? "")")
            print("skybench --jobs smoke:\n\(table)")
        }

        /// `--instructions` runs the broker, the client and the worker of each system under callgrind
        /// (valgrind, which `./ops/sky test` installs) and reports instructions per task: more
        /// than the C programs' and within reason for a debug build, and more for the typed client
        /// than for the raw one.
        /// Opt-in (`SKY_SMOKE_INSTRUCTIONS=1`): its 14 runs of debug binaries under callgrind
        /// take 60 s of both cores here alone, 170 s beside the other suites, which the
        /// 15-minute budget of a fresh clone's run does not have; `./ops/sky bench
        /// --instructions` runs the mode for real each time the figures are quoted.
        @Test(
            .disabled(
                if: SkyProcess.binaries.path.contains(".build-tsan"),
                "valgrind cannot run ThreadSanitizer's binaries (its runtime's CHECK fails under callgrind)"),
            .enabled(
                if: ProcessInfo.processInfo.environment["SKY_SMOKE_INSTRUCTIONS"] == "1",
                "SKY_SMOKE_INSTRUCTIONS=1 runs it (about a minute of both cores)"))
        func skybenchCountsInstructionsPerTaskUnderCallgrind() async throws {
            let run = try await Self.skybench(
                [
                    "--instructions", "--instruction-tasks", "40", "--payloads", "64", "--in-flight", "8",
                ], timeout: .seconds(300))
            #expect(run.status == 0, "skybench --instructions failed: \(run.errors)")
            #expect(
                run.output.split(separator: "\n").contains {
                    $0.hasPrefix("User-space instructions per task (callgrind")
                })
            let report = try #require(run.json, "skybench wrote no JSON report")
            let rows = try #require(try JSONSerialization.jsonObject(with: report) as? [[String: Any]])
            #expect(
                rows.compactMap { $0["role"] as? String } == [
                    "broker", "client", "worker", "typed client", "limited broker", "keyed broker",
                    "key-limited broker",
                ])
            // The typed client does what the raw one does, plus encoding and decoding.
            let client = try #require(rows.first { $0["role"] as? String == "client" }?["sky"] as? Double)
            let typed = try #require(rows.first { $0["role"] as? String == "typed client" }?["sky"] as? Double)
            #expect(typed > client, "typed \(typed), raw \(client)")
            for row in rows.prefix(3) {
                let sky = try #require(row["sky"] as? Double)
                let baseline = try #require(row["baseline"] as? Double)
                #expect(baseline > 500 && baseline < 100_000, "\(row)")
                #expect(sky > baseline && sky < 10_000_000, "\(row)")
                print("skybench --instructions smoke (debug build): \(row)")
            }
        }

        /// Runs skybench with `arguments`, the repository's baseline sources, a scratch build
        /// directory and a JSON report; returns its status, its output and the report it wrote.
        private static func skybench(
            _ arguments: [String], timeout: Duration
        ) async throws -> (status: Int32, output: String, errors: String, json: Data?) {
            let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("skybench-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: scratch) }
            let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("bench/baseline")
            let report = scratch.appendingPathComponent("report.json")
            let bench = try SkyProcess(
                "skybench",
                arguments + [
                    "--baseline-source", source.path, "--baseline-build", scratch.appendingPathComponent("build").path,
                    "--json", report.path,
                ])
            defer { bench.killNow() }
            let status = try await bench.waitForExit(timeout: timeout)
            return (
                status, bench.outputLines.joined(separator: "\n"), bench.errorText, try? Data(contentsOf: report)
            )
        }
    }
}
