import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension IntegrationSuite {
    /// `--metrics`: the broker and a worker serve Prometheus's text format over HTTP, which a
    /// real `promtool check metrics` accepts, with the series operators look for.
    @Suite("Prometheus metrics of the executables")
    struct MetricsTests {
        /// promtool from `ops/sky test` (SKY_PROMTOOL), or from PATH.
        static var promtool: String? {
            if let path = ProcessInfo.processInfo.environment["SKY_PROMTOOL"] { return path }
            let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
            return path.split(separator: ":").map { "\($0)/promtool" }.first {
                FileManager.default.isExecutableFile(atPath: $0)
            }
        }

        static func fetch(_ url: String) async throws -> String {
            let (data, response) = try await URLSession.shared.data(from: URL(string: url)!)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
            return String(decoding: data, as: UTF8.self)
        }

        /// The `metrics=` URL of a ready line.
        static func url(in lines: [String], of program: String) throws -> String {
            let ready = try #require(lines.first { $0.hasPrefix("\(program) ready ") })
            let word = try #require(ready.split(separator: " ").first { $0.hasPrefix("metrics=") })
            return String(word.dropFirst("metrics=".count))
        }

        @Test func theBrokerAndAWorkerServeMetricsThatPromtoolAccepts() async throws {
            let promtool = try #require(
                Self.promtool, "promtool is missing: run the tests with ./ops/sky test, or apt-get install prometheus")
            let state = JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments + ["--metrics", "127.0.0.1:0"])
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(
                name: "metered", extraArguments: ["--metrics", "127.0.0.1:0", "--flaky-every", "2"])
            let brokerURL = try Self.url(in: cluster.broker.outputLines, of: "skybroker")
            let workerURL = try Self.url(in: worker.outputLines, of: "skyworker")
            let sky = try await SkyClient(broker: cluster.clients)
            for index in 0..<20 {
                _ = try await sky.scan(EchoTask(message: "\(index)"))
                _ = try? await sky.scan(FlakyTask(value: index), options: ScanOptions(retry: .never))
            }
            _ = try await sky.submit(EchoTask(message: "a job")).value
            // The broker's figures come with its stats, once a second.
            var brokerText = ""
            try await eventually("the broker's metrics carry the period") {
                brokerText = try await Self.fetch(brokerURL)
                return brokerText.contains(#"sky_broker_tasks_total{service="sky.flaky",status="failed"}"#)
                    && brokerText.contains(#"sky_broker_jobs_total{event="succeeded"}"#)
            }
            for series in [
                #"sky_broker_tasks_total{service="sky.echo",status="ok"}"#,
                #"sky_broker_queue_depth{service="sky.echo"} 0"#,
                #"sky_broker_task_duration_seconds_bucket{service="sky.echo""#, "sky_broker_workers 1",
                "sky_broker_loop_iteration_max_seconds", #"sky_broker_jobs{state="held"}"#, "sky_broker_journal_bytes",
                "sky_broker_journal_commits_total",
            ] {
                #expect(brokerText.contains(series), "\(series)")
            }
            let workerText = try await Self.fetch(workerURL)
            for series in [
                #"sky_worker_tasks_total{service="sky.echo",outcome="ok"}"#,
                #"sky_worker_tasks_total{service="sky.flaky",outcome="handlerError"}"#,
                #"sky_worker_handler_duration_seconds_bucket{service="sky.echo""#, "sky_worker_running 0",
                "sky_worker_capacity",
            ] {
                #expect(workerText.contains(series), "\(series)")
            }
            for (name, text) in [("broker", brokerText), ("worker", workerText)] {
                let check = try SkyProcess(
                    program: URL(fileURLWithPath: "/bin/sh"),
                    ["-c", "printf '%s' \"$TEXT\" | \"$PROMTOOL\" check metrics"], name: "promtool-\(name)",
                    environment: ["TEXT": text, "PROMTOOL": promtool])
                let status = try await check.waitForExit()
                #expect(status == 0, "promtool on the \(name)'s metrics: \(check.outputLines) \(check.errorText)")
            }
            print(
                "metrics: broker \(brokerText.split(separator: "\n").count) lines, worker \(workerText.split(separator: "\n").count), promtool accepts both"
            )
            await sky.close()
            await cluster.stop()
        }

        @Test func aBadMetricsAddressIsRefusedByName() async throws {
            let broker = try SkyProcess("skybroker", ["--metrics", "localhost"])
            #expect(try await broker.waitForExit() != 0)
            #expect(broker.errorText.contains("--metrics localhost is not HOST:PORT"))
        }
    }
}
