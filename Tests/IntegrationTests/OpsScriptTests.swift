import Foundation
import SkyTestSupport
import Testing

extension SecondLineSuite {
    @Suite("ops/sky: up, status, down")
    struct OpsScriptTests {
        static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()

        /// Runs `ops/sky` with the test's executables, its own state directory and ports.
        static func ops(_ arguments: [String], state: URL, portBase: Int) async throws -> (
            status: Int32, output: String
        ) {
            let process = Process()
            process.executableURL = repository.appendingPathComponent("ops/sky")
            process.arguments = arguments
            var environment = ProcessInfo.processInfo.environment
            environment["SKY_BIN_DIR"] = SkyProcess.binaries.path
            environment["SKY_STATE_DIR"] = state.path
            environment["SKY_PORT_BASE"] = "\(portBase)"
            environment["SKY_WEB_LISTEN"] = "127.0.0.1:0"
            process.environment = environment
            // A file, not a pipe: the cluster's processes inherit the script's descriptors and
            // would keep a pipe open long after the script exited.
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ops-\(UUID().uuidString).log")
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
            defer { try? FileManager.default.removeItem(at: log) }
            let handle = try FileHandle(forWritingTo: log)
            defer { try? handle.close() }
            process.standardOutput = handle
            process.standardError = handle
            // Waits through the termination handler, without blocking a thread of the pool.
            let exited = AsyncStream.makeStream(of: Int32.self)
            process.terminationHandler = { exited.continuation.yield($0.terminationStatus) }
            try process.run()
            var statuses = exited.stream.makeAsyncIterator()
            _ = await statuses.next()
            let output = try String(contentsOf: log, encoding: .utf8)
            return (process.terminationStatus, output)
        }

        /// Three consecutive loopback ports nobody listens on (checked by binding them).
        static func freePortTriple() async throws -> Int {
            try await freePorts(offsets: [0, 1, 2])
        }

        /// A base port such that base + each offset is a loopback port nobody listens on.
        static func freePorts(offsets: [Int]) async throws -> Int {
            for _ in 0..<50 {
                let base = Int.random(in: 20_000..<60_000)
                var bound: [FakeBroker] = []
                for offset in offsets {
                    guard let broker = try? await FakeBroker.start(on: "tcp://127.0.0.1:\(base + offset)") else {
                        break
                    }
                    bound.append(broker)
                }
                for broker in bound { await broker.stop() }
                if bound.count == offsets.count { return base }
            }
            throw SkyProcess.Timeout(description: "no free ports at offsets \(offsets) found")
        }

        /// The pids in the pid files `up` wrote.
        static func pids(in state: URL) -> [Int32] {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: state.path)) ?? []
            return files.filter { $0.hasSuffix(".pid") }.compactMap { file in
                (try? String(contentsOf: state.appendingPathComponent(file), encoding: .utf8)).flatMap {
                    Int32($0.trimmingCharacters(in: .whitespacesAndNewlines))
                }
            }
        }

        /// A count that is not one ends the script at once, naming the flag and its range: `up
        /// --workers abc` used to start the broker, pass "abc" on to skywatch, and give up after
        /// 15 s saying that not all abc workers joined.
        @Test(arguments: [
            (["up", "--workers", "abc"], "--workers must be a whole number in 1...256, not abc"),
            (["up", "--capacity", "0"], "--capacity must be a whole number in 1...65536, not 0"),
            (["demo", "--sectors", "1e9"], "--sectors must be a whole number in 1...100000000, not 1e9"),
            (["up", "--workers"], "--workers needs a value"),
        ])
        func aBadCountIsRefusedBeforeAnythingStarts(arguments: [String], message: String) async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ops-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: state) }
            let started = ContinuousClock.now
            let (status, output) = try await Self.ops(arguments, state: state, portBase: 1)
            #expect(status == 1)
            #expect(output.contains("ops/sky: \(message)"), "\(output)")
            #expect(ContinuousClock.now - started < .seconds(2))
            #expect(Self.pids(in: state).isEmpty)
        }

        @Test func upStartsTheClusterStatusShowsItAndDownLeavesNoProcessBehind() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ops-\(UUID().uuidString)")
            let base = try await Self.freePortTriple()
            defer {
                // If the test failed half-way: SIGKILL whatever `up` started, then tidy up.
                for pid in Self.pids(in: state) { kill(pid, SIGKILL) }
                try? FileManager.default.removeItem(at: state)
            }
            // SKY_STATE_DIR may name a folder that holds more than ops/sky's files: up keeps them.
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
            let mine = state.appendingPathComponent("notes.txt")
            try Data("the user's".utf8).write(to: mine)
            let up = try await Self.ops(["up", "--workers", "2", "--capacity", "2"], state: state, portBase: base)
            #expect(FileManager.default.fileExists(atPath: mine.path), "up removed a file it did not write")
            #expect(up.status == 0, "\(up.output)")
            #expect(up.output.contains("Cluster up: skybroker ready clients=tcp://127.0.0.1:\(base)"))
            let pids = Self.pids(in: state)
            #expect(pids.count == 5, "broker, watcher, dashboard and two workers")
            let dashboard = try #require(
                up.output.range(of: "dashboard: http://127.0.0.1:[0-9]+/", options: .regularExpression),
                "\(up.output)")
            let page = try await MetricsTests.fetch(String(up.output[dashboard].dropFirst("dashboard: ".count)))
            #expect(page.contains("<title>Sky dashboard</title>"))

            let status = try await Self.ops(["status"], state: state, portBase: base)
            #expect(status.status == 0)
            for part in ["broker", "watch", "web", "worker-1", "worker-2"] {
                #expect(
                    status.output.range(of: "\(part) +pid [0-9]+ +running", options: .regularExpression) != nil,
                    "\(status.output)")
            }
            #expect(status.output.contains("2 worker(s) (worker-1, worker-2)"), "\(status.output)")

            let down = try await Self.ops(["down"], state: state, portBase: base)
            #expect(down.status == 0 && down.output.contains("Cluster down."))
            for pid in pids { #expect(kill(pid, 0) != 0, "process \(pid) still runs after down") }
            let after = try await Self.ops(["status"], state: state, portBase: base)
            #expect(after.output.contains("No cluster is up."))
        }

        /// `up --ha`: a PostgreSQL server in the state directory, an active broker and a standby,
        /// a worker, skywatch and skyweb given both. The active broker killed, the standby takes
        /// over and the worker follows (status shows it); a second `up` is refused while any of
        /// it runs (it wiped the pid files of a cluster whose first broker was gone); `down`
        /// stops all of it, PostgreSQL too.
        @Test(.timeLimit(.minutes(2)))
        func upWithHAStartsTwoBrokersOnPostgreSQLAndFollowsATakeover() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ops-\(UUID().uuidString)")
            let base = try await Self.freePorts(offsets: [0, 1, 2, 10, 11, 12, 20])
            let postmaster = state.appendingPathComponent("pg/data/postmaster.pid")
            defer {
                for pid in Self.pids(in: state) { kill(pid, SIGKILL) }
                if let text = try? String(contentsOf: postmaster, encoding: .utf8),
                    let pid = Int32(text.split(separator: "\n").first ?? "")
                {
                    kill(pid, SIGKILL)
                }
                try? FileManager.default.removeItem(at: state)
            }
            let up = try await Self.ops(["up", "--ha", "--workers", "1"], state: state, portBase: base)
            #expect(up.status == 0, "\(up.output)")
            #expect(up.output.contains("standby broker: clients=tcp://127.0.0.1:\(base + 10)"), "\(up.output)")
            let pids = Self.pids(in: state)
            #expect(pids.count == 5, "broker, standby, watcher, dashboard and a worker")

            let active = try String(contentsOf: state.appendingPathComponent("broker.pid"), encoding: .utf8)
            kill(try #require(Int32(active.trimmingCharacters(in: .whitespacesAndNewlines))), SIGKILL)
            try await eventually("the standby took over and the worker followed", timeout: .seconds(30)) {
                let status = try await Self.ops(["status"], state: state, portBase: base)
                return status.output.contains("1 worker(s) (worker-1)")
                    && status.output.contains("active broker epoch 2")
                    && status.output.contains("(the standby, since it took over)")
            }
            let again = try await Self.ops(["up", "--ha"], state: state, portBase: base)
            #expect(again.status == 1 && again.output.contains("a cluster is already up"), "\(again.output)")
            #expect(Self.pids(in: state).count == 5, "the refused up kept the pid files")

            let down = try await Self.ops(["down"], state: state, portBase: base)
            #expect(down.status == 0 && down.output.contains("Cluster down."))
            for pid in pids { #expect(kill(pid, 0) != 0, "process \(pid) still runs after down") }
            #expect(!FileManager.default.fileExists(atPath: postmaster.path), "PostgreSQL still runs after down")
        }

        /// `up --worker-binary` runs the user's own worker (here the example worker) in place of
        /// skyworker, and `down` stops it too; a path that is not an executable is refused.
        @Test func upRunsTheUsersOwnWorkerAndDownStopsIt() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ops-\(UUID().uuidString)")
            let base = try await Self.freePortTriple()
            defer {
                for pid in Self.pids(in: state) { kill(pid, SIGKILL) }
                try? FileManager.default.removeItem(at: state)
            }
            let missing = try await Self.ops(
                ["up", "--worker-binary", "/nonexistent/worker"], state: state, portBase: base)
            #expect(missing.status != 0 && missing.output.contains("is not an executable file"), "\(missing.output)")

            let example = SkyProcess.binaries.appendingPathComponent("sky-example-worker").path
            let up = try await Self.ops(
                ["up", "--workers", "2", "--worker-binary", example], state: state, portBase: base)
            #expect(up.status == 0, "\(up.output)")
            #expect(up.output.contains("2 × \(example)"), "\(up.output)")
            let pids = Self.pids(in: state)
            #expect(pids.count == 5, "broker, watcher, dashboard and two example workers")
            let status = try await Self.ops(["status"], state: state, portBase: base)
            #expect(status.output.contains("2 worker(s)"), "\(status.output)")

            let down = try await Self.ops(["down"], state: state, portBase: base)
            #expect(down.status == 0)
            for pid in pids { #expect(kill(pid, 0) != 0, "process \(pid) still runs after down") }
        }
    }
}
