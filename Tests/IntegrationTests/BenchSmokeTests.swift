import Foundation
import SkyTestSupport
import Testing

extension IntegrationSuite {
    /// The benchmark never runs in the test suite; this checks that it still works end to end.
    @Suite("skybench smoke test")
    struct BenchSmokeTests {
        /// skybench compiles the C baseline, measures a few hundred requests of Sky and of the
        /// baseline, prints its table and exits 0; its JSON report holds both systems' figures,
        /// their context switches per process, and Sky's typed path. The baseline runs with Sky's
        /// frame count (`--baseline-extra-frames 4`): its client checks that every reply came back
        /// with all 6 frames, and skybench that the client sent 6.
        @Test func skybenchMeasuresAFewHundredRequestsOfBothSystemsAndExitsZero() async throws {
            let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("skybench-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: scratch) }
            let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("bench/baseline")
            let report = scratch.appendingPathComponent("report.json")
            let bench = try SkyProcess(
                "skybench",
                [
                    "--rounds", "1", "--workers", "1", "--payloads", "64", "--in-flight", "8",
                    "--latency-requests", "200", "--latency-warmup", "20", "--warmup", "0.05", "--measure", "0.3",
                    "--queue-memory", "500", "--scan-tasks", "0", "--free", "--baseline-extra-frames", "4",
                    "--baseline-source", source.path, "--baseline-build", scratch.appendingPathComponent("build").path,
                    "--json", report.path,
                ])
            defer { bench.killNow() }
            let status = try await bench.waitForExit(timeout: .seconds(100))
            #expect(status == 0, "skybench failed: \(bench.errorText)")
            let table = bench.outputLines.joined(separator: "\n")
            #expect(table.contains("carry 4 extra frame(s) each (--baseline-extra-frames): as many as Sky's protocol"))
            #expect(table.contains("Sky / baseline"))
            #expect(table.contains("Targets"))
            #expect(table.contains("Context switches per task"))
            #expect(table.contains("- context switches per task at 8 in flight"))

            let json = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [String: Any])
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

        /// `--instructions` runs the broker and then the client of each system under callgrind
        /// (valgrind, which `./ops/sky test` installs) and reports instructions per task: more
        /// than the C programs' and within reason for a debug build.
        @Test(
            .disabled(
                if: SkyProcess.binaries.path.contains(".build-tsan"),
                "valgrind cannot run ThreadSanitizer's binaries (its runtime's CHECK fails under callgrind)"))
        func skybenchCountsInstructionsPerTaskUnderCallgrind() async throws {
            let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("skybench-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: scratch) }
            let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("bench/baseline")
            let report = scratch.appendingPathComponent("instructions.json")
            let bench = try SkyProcess(
                "skybench",
                [
                    "--instructions", "--instruction-tasks", "40", "--payloads", "64", "--in-flight", "8",
                    "--baseline-source", source.path, "--baseline-build", scratch.appendingPathComponent("build").path,
                    "--json", report.path,
                ])
            defer { bench.killNow() }
            let status = try await bench.waitForExit(timeout: .seconds(300))
            #expect(status == 0, "skybench --instructions failed: \(bench.errorText)")
            #expect(bench.outputLines.contains { $0.hasPrefix("User-space instructions per task (callgrind") })
            let rows = try #require(
                try JSONSerialization.jsonObject(with: Data(contentsOf: report)) as? [[String: Any]])
            #expect(rows.compactMap { $0["role"] as? String } == ["broker", "client"])
            for row in rows {
                let sky = try #require(row["sky"] as? Double)
                let baseline = try #require(row["baseline"] as? Double)
                #expect(baseline > 500 && baseline < 100_000, "\(row)")
                #expect(sky > baseline && sky < 10_000_000, "\(row)")
                print("skybench --instructions smoke (debug build): \(row)")
            }
        }
    }
}
