import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension SecondLineSuite {
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
            let state = IntegrationSuite.JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments + ["--metrics", "127.0.0.1:0"])
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(
                name: "metered", extraArguments: ["--metrics", "127.0.0.1:0", "--flaky-every", "2"])
            let brokerURL = try Self.url(in: cluster.broker.outputLines, of: "skybroker")
            let workerURL = try Self.url(in: worker.outputLines, of: "skyworker")
            let sky = try await SkyClient(broker: cluster.clients)
            try await sky.setRateLimit(RateLimit(perSecond: 1000, burst: 100), for: EchoTask.service)
            try await sky.setRateLimit(RateLimit(perSecond: 5, burst: 5), for: "mail.send")
            try await sky.setRateLimit(RateLimit(perSecond: 5, burst: 5, key: KeyScope()), for: "geocode")
            for index in 0..<20 {
                _ = try await sky.scan(EchoTask(message: "\(index)"))
                _ = try? await sky.scan(FlakyTask(value: index), options: ScanOptions(retry: .never))
            }
            // A malformed message: counted, and so a series of the dropped messages.
            let raw = try await RawPeer(connectingTo: cluster.clients)
            raw.send([Array("MDPC02".utf8), [1]])
            _ = try await sky.submit(EchoTask(message: "a job")).value
            _ = try await sky.submit(try Flow(group: [EchoTask(message: "a flow's step")])).value
            // The broker's figures come with its stats, once a second.
            var brokerText = ""
            try await eventually("the broker's metrics carry the period") {
                brokerText = try await Self.fetch(brokerURL)
                return brokerText.contains(#"sky_broker_tasks_total{service="sky.flaky",status="handlerError"}"#)
                    && brokerText.contains(#"sky_broker_rate_limited_starts_total{service="sky.echo",per="service"} 2"#)
                    && brokerText.contains(#"sky_broker_jobs_total{event="succeeded"}"#)
                    && brokerText.contains(#"sky_broker_flows_total{outcome="succeeded"} 1"#)
                    && brokerText.contains(#"sky_broker_dropped_messages_total{reason="malformedClientMessages"} 1"#)
            }
            for series in [
                #"sky_broker_tasks_total{service="sky.echo",status="ok"}"#,
                #"sky_broker_queue_depth{service="sky.echo"} 0"#,
                #"sky_broker_task_duration_seconds_bucket{service="sky.echo""#, "sky_broker_workers 1",
                #"sky_broker_dispatch_wait_seconds_bucket{service="sky.echo""#,
                #"sky_broker_service_queued_bytes{service="sky.echo"} 0"#,
                "sky_broker_loop_iteration_max_seconds", #"sky_broker_jobs{state="held"}"#, "sky_broker_journal_bytes",
                "sky_broker_journal_commits_total", "sky_broker_journal_failing 0", "sky_broker_flows 0",
                #"sky_broker_rate_limit_per_second{service="mail.send",per="service"} 5"#,
                #"sky_broker_rate_limit_throttled{service="sky.echo",per="service"} 0"#,
                #"sky_broker_rate_limit_per_second{service="geocode",per="key"} 5"#,
                #"sky_broker_rate_limit_keys_waiting{service="geocode",per="key"} 0"#,
            ] {
                #expect(brokerText.contains(series), "\(series)")
            }
            // A limit removed reads as none, not as its last value.
            try await sky.removeRateLimit(for: "mail.send")
            try await eventually("the removed limit's gauge at 0") {
                try await Self.fetch(brokerURL).contains(
                    #"sky_broker_rate_limit_per_second{service="mail.send",per="service"} 0"#)
            }
            let workerText = try await Self.fetch(workerURL)
            for series in [
                #"sky_worker_tasks_total{service="sky.echo",outcome="ok"}"#,
                // Each outcome of one service counted on its own, every other call failing.
                #"sky_worker_tasks_total{service="sky.flaky",outcome="handlerError"} 10"#,
                #"sky_worker_tasks_total{service="sky.flaky",outcome="ok"} 10"#,
                #"sky_worker_handler_duration_seconds_count{service="sky.flaky"} 20"#,
                #"sky_worker_handler_duration_seconds_bucket{service="sky.echo""#, "sky_worker_running 0",
                "sky_worker_capacity",
            ] {
                #expect(workerText.contains(series), "\(series)")
            }
            // The handlers' time is measured, and plausible: an echo takes well under a second.
            let durationSum = workerText.split(separator: "\n").first {
                $0.hasPrefix(#"sky_worker_handler_duration_seconds_sum{service="sky.echo""#)
            }
            let seconds = durationSum.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
            #expect(seconds.map { $0 > 0 && $0 < 1 } == true, "\(durationSum.map(String.init) ?? "no sum")")
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
            await raw.close()
            await sky.close()
            await cluster.stop()
        }

        /// The Prometheus server from `ops/sky test` (SKY_PROMETHEUS), or from PATH.
        static var prometheus: String? {
            if let path = ProcessInfo.processInfo.environment["SKY_PROMETHEUS"] { return path }
            let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
            return path.split(separator: ":").map { "\($0)/prometheus" }.first {
                FileManager.default.isExecutableFile(atPath: $0)
            }
        }

        /// A real Prometheus server on loopback scrapes the broker, and a series comes back from
        /// its query API: the endpoint works with the real consumer, not only with promtool.
        @Test func aRealPrometheusServerScrapesTheBrokerAndAnswersAQuery() async throws {
            let prometheus = try #require(
                Self.prometheus,
                "prometheus is missing: run the tests with ./ops/sky test, or apt-get install prometheus")
            let cluster = try await TestCluster.start(extraArguments: [
                "--state-dir", "none", "--metrics", "127.0.0.1:0",
            ])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "scraped")
            let target = try #require(URL(string: try Self.url(in: cluster.broker.outputLines, of: "skybroker")))
            let directory = IntegrationSuite.JobTests.StateDirectory()
            try FileManager.default.createDirectory(atPath: directory.path, withIntermediateDirectories: true)
            let config = directory.path + "/prometheus.yml"
            try Data(
                """
                global:
                  scrape_interval: 1s
                scrape_configs:
                  - job_name: sky-broker
                    static_configs:
                      - targets: ["\(target.host!):\(target.port!)"]
                """.utf8
            ).write(to: URL(fileURLWithPath: config))
            let port = try freeLoopbackPort()
            let server = cluster.track(
                try SkyProcess(
                    program: URL(fileURLWithPath: prometheus),
                    [
                        "--config.file=\(config)", "--storage.tsdb.path=\(directory.path)/data",
                        "--web.listen-address=127.0.0.1:\(port)",
                    ], name: "prometheus"))
            var answer = ""
            try await eventually("Prometheus has scraped the broker's worker count", timeout: .seconds(30)) {
                // 503 until the server is ready: asked again.
                let url = URL(string: "http://127.0.0.1:\(port)/api/v1/query?query=sky_broker_workers")!
                guard let (data, _) = try? await URLSession.shared.data(from: url) else { return false }
                answer = String(decoding: data, as: UTF8.self)
                return answer.contains(#""value":["#) && answer.contains(#","1"]"#)
            }
            #expect(answer.contains(#""job":"sky-broker""#), "\(answer)")
            #expect(server.isRunning, "\(server.errorText)")
            print("prometheus: \(answer)")
        }

        /// A client's metrics (skyscan's `--metrics`, served while it scans) pass promtool too.
        @Test func aClientsMetricsPassPromtool() async throws {
            let promtool = try #require(
                Self.promtool, "promtool is missing: run the tests with ./ops/sky test, or apt-get install prometheus")
            let cluster = try await TestCluster.start(extraArguments: ["--state-dir", "none"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "scanner", capacity: 2)
            let scan = cluster.track(
                try SkyProcess(
                    "skyscan",
                    ["--broker", cluster.clients, "--sectors", "1000000", "--size", "16", "--metrics", "127.0.0.1:0"]))
            let line = try await scan.waitForLine(onStandardError: true) { $0.hasPrefix("skyscan: metrics at ") }
            let url = String(line.dropFirst("skyscan: metrics at ".count))
            var text = ""
            try await eventually("the client has finished calls") {
                text = (try? await Self.fetch(url)) ?? ""
                return text.contains(#"sky_client_calls_total{service="sky.scan",outcome="ok"}"#)
            }
            for series in [
                #"sky_client_attempts_total{service="sky.scan"}"#,
                #"sky_client_call_duration_seconds_bucket{service="sky.scan""#,
                "sky_client_in_flight",
            ] {
                #expect(text.contains(series), "\(series)")
            }
            let check = try SkyProcess(
                program: URL(fileURLWithPath: "/bin/sh"),
                ["-c", "printf '%s' \"$TEXT\" | \"$PROMTOOL\" check metrics"],
                name: "promtool-client", environment: ["TEXT": text, "PROMTOOL": promtool])
            #expect(
                try await check.waitForExit() == 0,
                "promtool on the client's metrics: \(check.outputLines) \(check.errorText)")
        }

        @Test func aBadMetricsAddressIsRefusedByName() async throws {
            let broker = try SkyProcess("skybroker", ["--metrics", "localhost"])
            #expect(try await broker.waitForExit() != 0)
            #expect(broker.errorText.contains("--metrics localhost is not HOST:PORT"))
        }
    }
}
