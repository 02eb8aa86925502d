import Foundation
import SkyProtocol
import SkyTestSupport
import Testing

extension SecondLineSuite {
    /// Every executable refuses bad values at parse time: exit code 64 (usage) and a first line
    /// that names the flag and its range, never a trap or a process that serves nothing (issue
    /// 13, items 10 and 11). Files that cannot be read are a plain sentence and exit code 1.
    @Suite("Bad command-line values: one line, the right exit code")
    struct CommandLineValidationTests {
        struct Case: Sendable, CustomTestStringConvertible {
            var program: String
            var arguments: [String]
            var status: Int32 = 64
            /// Expected in the first line of standard error.
            var message: String

            var testDescription: String { "\(program) \(arguments.joined(separator: " "))" }
        }

        static let cases: [Case] = [
            .init(
                program: "skybroker", arguments: ["--heartbeat-interval", "1e300"],
                message: "--heartbeat-interval must be a number of seconds in 0.01...3600, not 1e+300"),
            .init(
                program: "skybroker", arguments: ["--rate-limit", "mmi.jobs.submit=1/s"],
                message: "mmi.jobs.submit is one of the broker's own services; they cannot be limited"),
            .init(
                program: "skybroker", arguments: ["--rate-limit", "a=0x10/s"],
                message: "--rate-limit a=0x10/s: 0x10/s is not a rate"),
            .init(
                program: "skybroker", arguments: ["--rate-limit", "a=100000/s:1"],
                message: "give a burst of at least 100"),
            .init(
                program: "skybroker", arguments: ["--rate-limit", "a"], message: "--rate-limit a gives no rate"),
            .init(
                program: "skybroker", arguments: ["--rate-limit", "geocode=10/s@customer"],
                message:
                    "is not a rate: give a count per s, m, h or d, as 100/s (a limit for each key of a payload field is --key-rate-limit"
            ),
            .init(
                program: "skyctl", arguments: ["limits", "set", "a.e", "--rate", "10/s", "--burst", "0"],
                message: "--rate 10/s --burst 0: a burst must be between 1 and 1000000 starts; got 0"),
            .init(
                program: "skybroker", arguments: ["--key-rate-limit", "geocode=10/s@customer:5"],
                message: "--key-rate-limit geocode=10/s@customer:5: the burst goes before @FIELD"),
            .init(
                program: "skybroker", arguments: ["--heartbeat-interval", "inf"],
                message: "--heartbeat-interval must be a number of seconds in 0.01...3600, not inf"),
            .init(
                program: "skybroker", arguments: ["--heartbeat-interval", "nan"],
                message: "--heartbeat-interval must be a number of seconds in 0.01...3600, not nan"),
            .init(
                program: "skybroker", arguments: ["--lease-grace", "1e300"],
                message: "--lease-grace must be a number of seconds in 0...86400"),
            .init(
                program: "skybroker", arguments: ["--max-frame-size", "0"],
                message: "--max-frame-size must be a whole number in 1024...2147483648, not 0"),
            .init(
                program: "skybroker", arguments: ["--max-frames", "2"],
                message: "--max-frames must be a whole number in 6...100000, not 2"),
            .init(
                program: "skybroker", arguments: ["--liveness", "0"],
                message: "--liveness must be a whole number in 1...1000"),
            .init(
                program: "skybroker", arguments: ["--max-deliveries", "0"],
                message: "--max-deliveries must be a whole number in 1...1000"),
            .init(
                program: "skybroker", arguments: ["--queue-limit=-1"],
                message: "--queue-limit must be a whole number in 0...100000000"),
            .init(
                program: "skybroker", arguments: ["--queue-bytes=-5"],
                message: "--queue-bytes must be a whole number in 0..."),
            .init(
                program: "skybroker", arguments: ["--client-queue-share", "2"],
                message: "--client-queue-share must be a number in 0.01...1, not 2.0"),
            .init(
                program: "skybroker", arguments: ["--max-wait", "0"],
                message: "--max-wait must be a number of seconds in 0.001...31536000"),
            .init(
                program: "skybroker", arguments: ["--no-workers-grace=-1"],
                message: "--no-workers-grace must be a number of seconds in 0...86400"),
            .init(
                program: "skybroker", arguments: ["--clients", "foo"], message: "--clients foo is not a ZeroMQ endpoint"
            ),
            .init(
                program: "skybroker", arguments: ["--workers", "tcp://127.0.0.1:70000"],
                message: "port 70000 is not 1...65535"),
            .init(
                program: "skybroker",
                arguments: ["--clients", "tcp://127.0.0.1:47001", "--workers", "tcp://127.0.0.1:47001"],
                message: "--clients and --workers are both tcp://127.0.0.1:47001: each needs an endpoint of its own"),
            .init(
                program: "skybroker", arguments: ["--workers", "tcp://*:47002", "--events", "tcp://127.0.0.1:47002"],
                message: "--workers and --events are both tcp://127.0.0.1:47002"),
            .init(
                program: "skybroker",
                arguments: ["--events", "ipc:///tmp/sky-same", "--clients", "ipc:///tmp/sky-same"],
                message: "--clients and --events are both ipc:///tmp/sky-same"),
            .init(
                program: "skybroker",
                arguments: ["--clients", "tcp://127.0.0.1:47003", "--metrics", "127.0.0.1:47003"],
                message: "--clients and --metrics are both tcp://127.0.0.1:47003"),
            .init(program: "skybroker", arguments: ["--heartbeat-interval", "abc"], message: "--heartbeat-interval"),
            .init(
                program: "skybroker", arguments: ["keygen", "--name", "k", "--directory", "/nonexistent/keys"],
                status: 1, message: "the directory /nonexistent/keys does not exist"),
            .init(
                program: "skybroker", arguments: ["--secret-key", "/nonexistent/broker.key"], status: 1,
                message: "cannot read the key file /nonexistent/broker.key: No such file or directory"),
            .init(
                program: "skyworker", arguments: ["--drain-grace", "1e300"],
                message: "--drain-grace must be a number of seconds in 0...86400"),
            .init(
                program: "skyworker", arguments: ["--heartbeat-interval", "nan"],
                message: "--heartbeat-interval must be a number of seconds"),
            // Valid as an endpoint, but libzmq cannot connect to it (a socket path is at most 107
            // bytes): the worker stops at once and names the cause instead of retrying forever.
            .init(
                program: "skyworker", arguments: ["--broker", "ipc:///tmp/" + String(repeating: "x", count: 150)],
                status: 1, message: "cannot connect to the broker at ipc:///tmp/xxx"),
            .init(
                program: "skyworker", arguments: ["--capacity", "0"],
                message: "--capacity must be a whole number in 1...65536, not 0"),
            .init(
                program: "skyworker", arguments: ["--name", ""],
                message: "--name \"\" (0 bytes) is not 1...255 bytes of UTF-8 without control characters"),
            .init(
                program: "skyworker", arguments: ["--name", "two\nlines"],
                message: "--name \"two\\nlines\" (9 bytes) is not 1...255"),
            // The broker answered it invalidPayload, whose advice is about task types.
            .init(
                program: "skyctl", arguments: ["jobs", "list", "--service", "a\nb"],
                message: "--service \"a\\nb\" (3 bytes) is not 1...255 bytes of UTF-8 without control characters"),
            .init(
                program: "skyctl", arguments: ["jobs", "bulk", "redo", "--state", "failed"],
                message: "redo is not a bulk action; use retry, cancel, delete or count"),
            .init(
                program: "skyctl", arguments: ["jobs", "bulk", "delete", "--submitted-before", "yesterday"],
                message: "--submitted-before yesterday is not a time; give an ISO 8601 date-time"),
            .init(
                program: "skyctl",
                arguments: ["jobs", "bulk", "delete", "--submitted-after", "300000000-01-01T00:00:00Z"],
                message: "--submitted-after 300000000-01-01T00:00:00Z is not a time"),
            .init(
                program: "skyctl", arguments: ["jobs", "bulk", "delete", "--submitted-after", "-5m"],
                message: "--submitted-after -5m is not a time"),
            .init(
                program: "skyctl", arguments: ["jobs", "bulk", "cancel", "--state", "scheduled"],
                message: "--state \"scheduled\" is not a state a bulk action selects by"),
            // Under a second is the API's refusal too, but a flag's is 64 naming the flag.
            .init(
                program: "skyctl", arguments: ["jobs", "submit", "sky.echo", "--json", "{}", "--retention", "0.5"],
                message: "--retention must be a number of seconds in 1...315360000, not 0.5"),
            .init(
                program: "skybroker", arguments: ["--failed-retention", "-1"],
                message: "--failed-retention must be a number of seconds in 0...315360000"),
            .init(
                program: "skybroker", arguments: ["keygen", "--name", "a\nb", "--directory", "/tmp"],
                message: "--name \"a\\nb\" is not a key name: use up to 100 letters, digits"),
            .init(
                program: "skybroker", arguments: ["keygen", "--name", "..", "--directory", "/tmp"],
                message: "--name \"..\" is not a key name"),
            .init(
                program: "skyworker", arguments: ["--workloads", " , "],
                message: "--workloads names no workload; choose from sky.scan, sky.echo"),
            .init(
                program: "skyworker", arguments: ["--workloads", "sky.echo,sky.nope"],
                message: "--workloads: unknown built-in workload sky.nope; choose from sky.scan"),
            .init(
                program: "skyworker", arguments: ["--workloads", "sky.scan", "--inline-echo"],
                message: "--inline-echo changes how sky.echo is served, and --workloads does not name it"),
            .init(
                program: "skyworker", arguments: ["--liveness", "0"],
                message: "--liveness must be a whole number in 1...1000"),
            .init(
                program: "skyworker", arguments: ["--flaky-every", "0"], message: "--flaky-every must be a whole number"
            ),
            .init(
                program: "skyworker", arguments: ["--broker", "foo"], message: "--broker foo is not a ZeroMQ endpoint"),
            .init(
                program: "skyworker", arguments: ["--broker", "tcp://*:5556"],
                message: "* as host only works when binding"),
            .init(
                program: "skyworker",
                arguments: ["--broker-key", "/nonexistent/b.pub", "--secret-key", "/nonexistent/w.key"], status: 1,
                message: "cannot read the key file /nonexistent/b.pub: No such file or directory"),
            .init(
                program: "skyscan", arguments: ["--timeout", "1e300"],
                message: "--timeout must be a number of seconds in 0.001...86400"),
            .init(
                program: "skyscan", arguments: ["--first", "9223372036854775807"],
                message: "--first must be a whole number in 0..."),
            .init(program: "skyscan", arguments: ["--sectors=-1"], message: "--sectors must be a whole number in 0..."),
            .init(
                program: "skyscan", arguments: ["--sectors", "9223372036854775807"],
                message: "--sectors must be a whole number in 0..."),
            .init(
                program: "skyscan", arguments: ["--concurrency", "0"],
                message: "--concurrency must be a whole number in 1...100000"),
            .init(
                program: "skyscan", arguments: ["--attempts", "0"],
                message: "--attempts must be a whole number in 1...100"),
            .init(program: "skyscan", arguments: ["--size", "1"], message: "--size must be a whole number in"),
            .init(
                program: "skyscan", arguments: ["--broker", "foo"], message: "--broker foo is not a ZeroMQ endpoint"),
            .init(
                program: "skywatch", arguments: ["--broker", "foo"], message: "--broker foo is not a ZeroMQ endpoint"),
            .init(
                program: "skywatch", arguments: ["--events", "tcp://host"],
                message: "--events tcp://host is not a ZeroMQ endpoint (no port)"),
            .init(
                program: "skywatch", arguments: ["--timeout", "inf"],
                message: "--timeout must be a number of seconds in 0.001...86400, not inf"),
            .init(
                program: "skywatch", arguments: ["--wait-workers=-1"],
                message: "--wait-workers must be a whole number in 0...1000000"),
            // A negative number after a space is the flag's value, not another flag: it got
            // "Missing value for '--heartbeat-interval'", which named no range.
            .init(
                program: "skywatch", arguments: ["--wait-workers", "-1"],
                message: "--wait-workers must be a whole number in 0...1000000, not -1"),
            .init(
                program: "skybroker", arguments: ["--heartbeat-interval", "-1"],
                message: "--heartbeat-interval must be a number of seconds in 0.01...3600, not -1.0"),
            .init(
                program: "skybroker", arguments: ["--queue-limit", "-5"],
                message: "--queue-limit must be a whole number in 0...100000000, not -5"),
            .init(
                program: "skybroker", arguments: ["--journal-max-bytes", "-1"],
                message: "--journal-max-bytes must be a whole number in 0...1125899906842624, not -1"),
            // inproc:// joins sockets of one process: a broker bound there serves nobody.
            .init(
                program: "skybroker", arguments: ["--clients", "inproc://sky"],
                message: "--clients inproc://sky: inproc:// joins sockets inside one process"),
            .init(
                program: "skyworker", arguments: ["--broker", "inproc://sky"],
                message: "--broker inproc://sky: inproc:// joins sockets inside one process"),
            .init(
                program: "skyctl",
                arguments: ["services", "list", "--broker", "tcp://127.0.0.1:5555,tcp://127.0.0.1:5555"],
                message: "names tcp://127.0.0.1:5555 twice"),
            .init(
                program: "skyworker", arguments: ["--capacity", "-2"],
                message: "--capacity must be a whole number in 1...65536, not -2"),
            .init(
                program: "skybroker",
                arguments: ["--state-dir", "none", "--trace-log", "/nonexistent/folder/spans.jsonl"],
                status: 1,
                message:
                    "skybroker: cannot write the trace log /nonexistent/folder/spans.jsonl: it cannot be created (does its folder exist"
            ),
            // libzmq's "No such device" for a DNS name to bind, and "No such file or directory"
            // for an ipc:// path in a missing directory, each with what to do.
            .init(
                program: "skybroker",
                arguments: [
                    "--state-dir", "none", "--clients", "tcp://nonexistent.invalid:5555", "--workers",
                    "tcp://127.0.0.1:*",
                    "--events", "tcp://127.0.0.1:*",
                ], status: 1, message: "No such device. A tcp:// host to bind is an IP address of this machine"),
            .init(
                program: "skybroker",
                arguments: [
                    "--state-dir", "none", "--clients", "ipc:///nonexistent/sky/clients", "--workers",
                    "tcp://127.0.0.1:*",
                    "--events", "tcp://127.0.0.1:*",
                ], status: 1,
                message:
                    "No such file or directory. The ipc:// path's directory does not exist; make it first (--clients)."),
            // A path under a file: Foundation said only "NSCocoaErrorDomain error 512".
            .init(
                program: "skybroker", arguments: ["--state-dir", "/etc/passwd/state"], status: 1,
                message:
                    "skybroker: cannot make the state directory /etc/passwd/state: /etc/passwd is a file, not a directory; pick another with --state-dir"
            ),
            .init(
                program: "skybroker", arguments: ["--store", "mysql://sky:secret@db/sky"],
                message:
                    "--store mysql://sky:***@db/sky is not a PostgreSQL URI: give postgresql://user@host:5432/database"),
            // libpq takes what follows the first @ for the host.
            .init(
                program: "skybroker", arguments: ["--store", "postgresql://sky:p@ss@127.0.0.1:5432/sky"],
                message:
                    "--store postgresql://sky:***@127.0.0.1:5432/sky has more than one @ before its host: write an @ in the user or password as %40"
            ),
            .init(
                program: "skybroker", arguments: ["--store", "postgresql://db/sky", "--state-dir", "/var/lib/sky"],
                message: "--store and --state-dir both say where the jobs are kept: give one"),
            // Without a shared store there is no standby to take over: the flag would do nothing.
            .init(
                program: "skybroker", arguments: ["--takeover-after", "3", "--state-dir", "none"],
                message: "--takeover-after applies to brokers that share a --store (PostgreSQL)"),
            .init(
                program: "skyworker", arguments: ["--broker", "tcp://127.0.0.1:5556,,tcp://127.0.0.1:5566"],
                message: "has an empty entry: give endpoints separated by single commas"),
            .init(
                program: "skywatch", arguments: ["--broker", "tcp://127.0.0.1:5555,"],
                message: "--broker tcp://127.0.0.1:5555, has an empty entry"),
            // No server listens on port 1: the broker says which store, why, and what to check.
            .init(
                program: "skybroker",
                arguments: [
                    "--store", "postgresql://sky:secret@127.0.0.1:1/sky?connect_timeout=5", "--clients",
                    "tcp://127.0.0.1:*", "--workers", "tcp://127.0.0.1:*", "--events", "tcp://127.0.0.1:*",
                ], status: 1,
                message:
                    "skybroker: cannot reach the job store postgresql://sky:***@127.0.0.1:1/sky?connect_timeout=5 (connection to server at \"127.0.0.1\", port 1 failed: Connection refused; Is the server running"
            ),
            .init(
                program: "skyweb", arguments: ["--listen", "8470"],
                message: "--listen 8470 is not HOST:PORT with an IPv4 address and a port in 0...65535"),
            .init(
                program: "skyweb", arguments: ["--broker", "localhost:5555"],
                message: "--broker localhost:5555 is not a ZeroMQ endpoint"),
            .init(
                program: "skybench", arguments: ["--measure", "1e300"],
                message: "--measure must be a number of seconds in 0.001...3600"),
            .init(
                program: "skybench", arguments: ["--rounds", "0"],
                message: "--rounds must be a whole number in 1...1000"),
            .init(
                program: "skybench", arguments: ["--baseline-extra-frames", "5"],
                message: "--baseline-extra-frames must be a whole number in 0...4"),
            .init(
                program: "skybench", arguments: ["--in-flight", "0"],
                message: "--in-flight takes comma-separated whole numbers"),
        ]

        @Test(arguments: cases) func aBadValueIsOneLineAndTheRightExitCode(_ bad: Case) async throws {
            let process = try SkyProcess(bad.program, bad.arguments)
            let status = try await process.waitForExit(timeout: .seconds(20))
            let firstLine = process.errorText.split(separator: "\n").first.map(String.init) ?? ""
            #expect(status == bad.status, "\(bad.testDescription): \(process.errorText)")
            #expect(firstLine.contains(bad.message), "first line: \(firstLine)")
            #expect(!process.errorText.contains("Fatal error"), "\(process.errorText)")
            #expect(!process.errorText.contains("NSCocoaErrorDomain"), "\(process.errorText)")
            #expect(process.outputLines.isEmpty, "nothing may claim to be ready: \(process.outputLines)")
        }

        /// `skyscan --sectors 1000000000` once grew to 1 GiB in 3 s (every task and latency kept);
        /// it now makes tasks as it starts them and keeps latencies in a histogram.
        @Test func skyscanMemoryStaysBoundedWhateverTheSectorCount() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "scanner", capacity: 2)
            let scan = try cluster.track(
                SkyProcess(
                    "skyscan", ["--broker", cluster.clients, "--sectors", "1000000000", "--size", "16", "--json"]))
            // What the process holds once 5,000 scans are done (the issue measured after 3 s;
            // a count does not depend on how busy the machine is).
            try await eventually("5,000 scans done", timeout: .seconds(60 * timingScale)) {
                try await cluster.snapshot().tasksCompleted ?? 0 >= 5_000
            }
            let status = try String(contentsOfFile: "/proc/\(scan.pid)/status", encoding: .utf8)
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
            let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") ?? .max
            print("skyscan --sectors 1000000000: resident \(kilobytes / 1024) MiB after 5,000 scans")
            #expect(scan.isRunning)
            #expect(kilobytes < 150 * 1024)
            scan.killNow()
        }
    }
}
