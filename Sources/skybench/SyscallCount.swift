import Foundation
import Sky
import SkyTestSupport

/// System calls per task of the broker, the client and the worker, Sky against the baseline,
/// counted by `perf trace -s`: the cost that instruction counts do not show (on a virtual
/// machine a system call can cost more than the user-space work around it).
///
/// The broker and the worker run natively, `perf trace` attached to each while the client runs
/// (under `perf trace` itself), `tasks` and then `3 × tasks` requests of `payload` bytes at
/// `inFlight`. The difference of the two counts divided by `2 × tasks` is a task's, without the
/// processes' start, the attaching and the idle time around the load.
struct SyscallCount {
    /// One role's figures: system calls per task in all, and by call.
    struct Row: Codable, Sendable {
        var role: String
        var sky: Double
        var baseline: Double?
        var skyCalls: [String: Double]
        var baselineCalls: [String: Double]?
    }

    let perf: URL
    let baseline: BaselinePrograms?
    let tasks: Int
    let payload: Int
    let inFlight: Int
    let transport: Transport
    var workerHandlers = WorkerPlacement.pool
    var clientCallers = CallerPlacement.pool

    /// `perf`, if it is installed and may trace system calls here.
    static func findPerf() -> URL? {
        for directory in ["/usr/bin", "/usr/local/bin", "/bin"] {
            let path = "\(directory)/perf"
            if FileManager.default.isExecutableFile(atPath: path) { return URL(fileURLWithPath: path) }
        }
        return nil
    }

    func run() async throws -> [Row] {
        let sky = try await perTask { try await skyCounts(tasks: $0) }
        var base: [String: [String: Double]]?
        if let baseline { base = try await perTask { try await baselineCounts(tasks: $0, baseline) } }
        return ["broker", "client", "worker"].map { role in
            let calls = sky[role] ?? [:]
            let baseCalls = base?[role]
            return Row(
                role: role, sky: calls.values.reduce(0, +), baseline: baseCalls.map { $0.values.reduce(0, +) },
                skyCalls: calls, baselineCalls: baseCalls)
        }
    }

    /// The report: one line per role, with Sky ÷ baseline and each system's most frequent calls.
    static func table(_ rows: [Row], payload: Int, inFlight: Int) -> String {
        var lines = [
            "System calls per task (perf trace; \(payload) B, \(inFlight) in flight, 1 worker)",
            "role     Sky      baseline  Sky / baseline",
        ]
        for row in rows {
            let baseline = row.baseline.map { String(format: "%-9.2f %.2f", $0, $0 > 0 ? row.sky / $0 : 0) } ?? "-"
            lines.append(
                "\(row.role.padding(toLength: 8, withPad: " ", startingAt: 0)) \(String(format: "%-8.2f", row.sky)) \(baseline)"
            )
        }
        for row in rows {
            lines.append("  \(row.role), Sky: \(most(row.skyCalls))")
            if let calls = row.baselineCalls { lines.append("  \(row.role), baseline: \(most(calls))") }
        }
        return lines.joined(separator: "\n")
    }

    /// The calls made at least once in 100 tasks, the most first.
    private static func most(_ calls: [String: Double]) -> String {
        let shown = calls.filter { $0.value >= 0.01 }.sorted {
            $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key
        }
        guard !shown.isEmpty else { return "none" }
        return shown.map { "\($0.key) \(String(format: "%.2f", $0.value))" }.joined(separator: ", ")
    }

    private func perTask(
        _ counts: (Int) async throws -> [String: [String: Int]]
    ) async throws -> [String: [String: Double]] {
        let few = try await counts(tasks)
        let many = try await counts(3 * tasks)
        var result: [String: [String: Double]] = [:]
        for (role, calls) in many {
            var perTask: [String: Double] = [:]
            for (call, count) in calls {
                let value = Double(count - (few[role]?[call] ?? 0)) / Double(2 * tasks)
                if value > 0 { perTask[call] = value }
            }
            result[role] = perTask
        }
        return result
    }

    // MARK: Runs

    private func skyCounts(tasks: Int) async throws -> [String: [String: Int]] {
        progress("system calls: sky, \(tasks) tasks under perf trace")
        let endpoints = transport.endpoints(for: "sky-syscalls")
        let started = try await StartedBroker.start(
            clients: endpoints[0], workers: endpoints[1], events: endpoints[2], arguments: ["--log-level", "warning"])
        var processes = [started.process]
        defer { for process in processes { process.killNow() } }
        let worker = try SkyProcess(
            "skyworker",
            [
                "--broker", started.workers, "--capacity", "16", "--workloads", "sky.echo", "--log-level", "warning",
            ] + workerHandlers.arguments)
        processes.append(worker)
        let watcher = try await SkyClient(broker: started.clients)
        try await InstructionCount.waitForWorker(watcher)
        await watcher.close()
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return try await count(
            broker: started.process.pid, worker: worker.pid,
            client: [
                me.path, "--load-client", started.clients, "--load-tasks", "\(tasks)", "--in-flight", "\(inFlight)",
                "--payloads", "\(payload)", "--client-callers", clientCallers.rawValue,
            ], environment: [:])
    }

    private func baselineCounts(tasks: Int, _ programs: BaselinePrograms) async throws -> [String: [String: Int]] {
        progress("system calls: baseline, \(tasks) tasks under perf trace")
        let endpoints = transport.endpoints(for: "baseline-syscalls")
        let broker = try SkyProcess(program: programs.broker, [endpoints[0], endpoints[1]], name: "baseline-broker")
        var processes = [broker]
        defer { for process in processes { process.killNow() } }
        // "ready FRONT BACK"
        let ready = try await broker.waitForLine(timeout: .seconds(20)) { $0.hasPrefix("ready ") }.split(separator: " ")
        guard ready.count == 3 else { throw BenchError("the baseline broker said \(ready)") }
        let worker = try SkyProcess(program: programs.worker, [String(ready[2]), "16"], name: "baseline-worker")
        processes.append(worker)
        return try await count(
            broker: broker.pid, worker: worker.pid,
            client: [programs.client.path, String(ready[1]), "cnt", "\(payload)", "\(inFlight)", "\(tasks)", "-"],
            environment: programs.clientEnvironment)
    }

    /// Runs `client` under `perf trace` with `perf trace` attached to the broker and the worker
    /// meanwhile; returns each role's calls by name.
    private func count(
        broker: Int32, worker: Int32, client: [String], environment: [String: String]
    ) async throws -> [String: [String: Int]] {
        let files = (0..<3).map { _ in
            FileManager.default.temporaryDirectory.appendingPathComponent("skybench-perf-\(UUID().uuidString).txt")
        }
        defer { for file in files { try? FileManager.default.removeItem(at: file) } }
        var attached: [SkyProcess] = []
        defer { for process in attached { process.killNow() } }
        for (pid, file) in [(broker, files[0]), (worker, files[1])] {
            attached.append(try perfTrace(["-o", file.path, "-p", "\(pid)"], name: "perf-trace"))
        }
        // perf prints nothing once it is attached: a moment's grace, whose idle calls the
        // difference of the two runs takes out.
        try await Task.sleep(for: .milliseconds(500))
        let load = try perfTrace(
            ["-o", files[2].path, "--"] + client, name: "perf-trace-client", environment: environment)
        guard try await load.waitForExit(timeout: .seconds(600)) == 0 else {
            throw BenchError("the client under perf trace failed: \(load.errorText)")
        }
        // Stopped by SIGINT, perf writes its summary (its exit status says only that it was
        // interrupted: the summary is what counts, and its absence is reported below).
        for process in attached {
            process.signal(SIGINT)
            _ = try await process.waitForExit(timeout: .seconds(60))
        }
        let said = (attached + [load]).map(\.errorText).joined(separator: "\n")
        do {
            return [
                "broker": try Self.calls(in: files[0]), "worker": try Self.calls(in: files[1]),
                "client": try Self.calls(in: files[2]),
            ]
        } catch {
            throw BenchError("\(error); perf said: \(said)")
        }
    }

    /// `perf trace -s` with `arguments`, through `env --default-signal`: a child spawned from a
    /// thread of the cooperative pool starts with every signal blocked, and perf would then not
    /// stop at SIGINT, nor see its workload end.
    private func perfTrace(
        _ arguments: [String], name: String, environment: [String: String] = [:]
    ) throws -> SkyProcess {
        try SkyProcess(
            program: URL(fileURLWithPath: "/usr/bin/env"), ["--default-signal", perf.path, "trace", "-s"] + arguments,
            name: name, environment: environment)
    }

    /// The calls of every thread in a `perf trace -s` summary, by name.
    static func calls(in file: URL) throws -> [String: Int] {
        guard let text = try? String(contentsOf: file, encoding: .utf8), text.contains("Summary of events") else {
            throw BenchError(
                "perf trace wrote no summary to \(file.path) (does perf trace work here? try perf trace -s -- true)")
        }
        var calls: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            // "   epoll_wait   1234   0   12.3 ...": a name, then the count.
            guard line.hasPrefix("   "), words.count >= 3, let count = Int(words[1]), let first = words[0].first,
                first.isLetter, words[0] != "syscall"
            else { continue }
            calls[String(words[0]), default: 0] += count
        }
        return calls
    }
}
