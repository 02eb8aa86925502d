import Foundation
import Sky
import SkyBrokerKit
import SkyProtocol
import SkyTestSupport
import SkyWire
import SkyWorkerKit
import Testing

extension SecondLineSuite {
    /// The defaults README.md, docs/client.md, docs/worker.md and docs/operations.md state are what the code
    /// uses: read from the public configuration types, and from each executable's `--help`
    /// (whose defaults come from the same types).
    @Suite("Documented defaults")
    struct DefaultsTests {
        struct Default: Sendable, CustomTestStringConvertible {
            var name: String
            /// What the docs say, in the configuration type's unit.
            var documented: Double
            var actual: Double
            /// The executable and flag that expose it, and the value `--help` should show.
            var flag: (executable: String, name: String, shown: String)?

            var testDescription: String { name }
        }

        static let broker = BrokerConfiguration()
        static let worker = SkyWorker.Configuration()
        static let client = SkyClient.Configuration()

        static let table: [Default] = [
            Default(
                name: "attempt timeout 30 s", documented: 30, actual: ScanOptions.default.timeout?.inSeconds ?? 0),
            Default(name: "connect timeout 5 s", documented: 5, actual: client.connectTimeout.inSeconds),
            Default(
                name: "client request limit 16 MiB", documented: 16_777_216, actual: Double(client.maxRequestBytes)),
            Default(name: "retries: 3 attempts", documented: 3, actual: Double(RetryPolicy.default.maxAttempts)),
            Default(
                name: "worker expiry 3 s", documented: 3, actual: broker.routing.expiry.inSeconds,
                flag: ("skybroker", "--heartbeat-interval", "1.0")),
            Default(
                name: "liveness 3", documented: 3, actual: Double(broker.routing.liveness),
                flag: ("skybroker", "--liveness", "3")),
            Default(
                name: "frame limit 16 MiB", documented: 16_777_216, actual: Double(broker.maxFrameSize),
                flag: ("skybroker", "--max-frame-size", "16777216")),
            Default(
                name: "queue limit 100,000", documented: 100_000, actual: Double(broker.routing.queueLimit),
                flag: ("skybroker", "--queue-limit", "100000")),
            Default(
                name: "queue bytes 256 MiB", documented: 268_435_456, actual: Double(broker.routing.queueBytesLimit),
                flag: ("skybroker", "--queue-bytes", "268435456")),
            Default(
                name: "client queue share 0.5", documented: 0.5, actual: broker.routing.clientQueueShare,
                flag: ("skybroker", "--client-queue-share", "0.5")),
            Default(
                name: "max wait 1 h", documented: 3600, actual: broker.routing.maxWait.inSeconds,
                flag: ("skybroker", "--max-wait", "3600.0")),
            Default(
                name: "no-workers grace 2 s", documented: 2, actual: broker.routing.noWorkersGrace.inSeconds,
                flag: ("skybroker", "--no-workers-grace", "2.0")),
            Default(
                name: "lease grace 5 s", documented: 5, actual: broker.routing.leaseGrace.inSeconds,
                flag: ("skybroker", "--lease-grace", "5.0")),
            Default(
                name: "journal limit none (0)", documented: 0, actual: Double(broker.journalMaxBytes),
                flag: ("skybroker", "--journal-max-bytes", "0")),
            Default(
                name: "takeover after 5 s", documented: 5, actual: broker.takeoverAfter.inSeconds,
                flag: ("skybroker", "--takeover-after", "5.0")),
            Default(
                name: "job retention 24 h", documented: 86_400, actual: JobOptions().retention.inSeconds),
            Default(
                name: "job wait hold 20 s", documented: 20, actual: BrokerService.jobWaitHold.inSeconds),
            Default(
                name: "deliveries 3", documented: 3, actual: Double(broker.routing.maxDeliveries),
                flag: ("skybroker", "--max-deliveries", "3")),
            Default(
                name: "worker expiry of the broker 3 s", documented: 3, actual: worker.liveness.expiry.inSeconds,
                flag: ("skyworker", "--liveness", "3")),
            Default(
                name: "worker heartbeat 1 s", documented: 1, actual: worker.liveness.heartbeatInterval.inSeconds,
                flag: ("skyworker", "--heartbeat-interval", "1.0")),
            Default(
                name: "drain grace 30 s", documented: 30, actual: worker.drainGrace.inSeconds,
                flag: ("skyworker", "--drain-grace", "30.0")),
        ]

        @Test(arguments: table)
        func theDocumentedDefaultIsTheOneInUse(_ entry: Default) async throws {
            #expect(entry.actual == entry.documented)
            guard let flag = entry.flag else { return }
            let command = flag.executable == "skybroker" ? ["serve", "--help"] : ["--help"]
            let help = try SkyProcess(flag.executable, command)
            #expect(try await help.waitForExit() == 0)
            // ArgumentParser prints each option's help followed by "(default: value)", wrapped:
            // the flag's block runs to the next option, its words joined again.
            let lines = help.outputLines.map { $0.trimmingCharacters(in: .whitespaces) }
            let start = try #require(lines.firstIndex { $0.hasPrefix("\(flag.name) ") }, "\(flag.name) in --help")
            let rest = lines[(start + 1)...]
            let end = rest.firstIndex { $0.hasPrefix("-") } ?? rest.endIndex
            let block = lines[start..<end].joined(separator: " ")
            #expect(block.contains("(default: \(flag.shown))"), "\(block)")
        }
    }
}
