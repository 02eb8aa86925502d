import Foundation
import Sky
import SkyTestSupport
import SkyWorkloads
import Synchronization

/// `--instructions`: user-space instructions per task of the broker, the client and the
/// worker, Sky against the baseline, counted by callgrind. Times on a small virtual machine move by ±20 %
/// between runs; instruction counts repeat to a fraction of a percent.
///
/// One process at a time runs under `valgrind --tool=callgrind` (every thread of it: libzmq's
/// I/O threads count too), the others natively, `tasks` and then `3 × tasks` requests of
/// `payload` bytes at `inFlight`. The difference of the two totals divided by `2 × tasks` is the
/// cost of a task without the process's start and exit.
struct InstructionCount {
    /// One role's figures.
    struct Row: Codable, Sendable {
        var role: String
        var sky: Double
        var baseline: Double?
    }

    let baseline: BaselinePrograms?
    let callgrind: Callgrind
    let tasks: Int
    let payload: Int
    let inFlight: Int
    let transport: Transport
    /// Where Sky's worker runs its handlers and the client its calls (as in the timed runs).
    var workerHandlers = WorkerPlacement.pool
    var clientCallers = CallerPlacement.pool

    func run() async throws -> [Row] {
        var rows: [Row] = []
        for role in ["broker", "client", "worker"] {
            let sky = try await perTask { try await skyTotal(role: role, tasks: $0) }
            var row = Row(role: role, sky: sky)
            if let baseline {
                row.baseline = try await perTask { try await baselineTotal(role: role, tasks: $0, programs: baseline) }
            }
            rows.append(row)
        }
        // The typed path's own cost: the same client making `scan(EchoTask)` calls (C has none).
        let typed = try await perTask { try await skyTotal(role: "client", tasks: $0, typed: true) }
        rows.append(Row(role: Self.typedClient, sky: typed))
        // A rate limit's own cost: the broker with the service limited, at a rate that never
        // binds (under callgrind any real one would), so that only its bookkeeping counts.
        let limited = try await perTask {
            try await skyTotal(
                role: "broker", tasks: $0, brokerArguments: ["--rate-limit", "\(EchoTask.service)=1000000/s:1000000"])
        }
        rows.append(Row(role: Self.limitedBroker, sky: limited))
        // A limit per key's own cost: calls with a concurrency key (which take turns by key),
        // without a limit and then under the same never-binding rate per key.
        let keyed = try await perTask { try await skyTotal(role: "broker", tasks: $0, key: "k") }
        rows.append(Row(role: Self.keyedBroker, sky: keyed))
        let keyLimited = try await perTask {
            try await skyTotal(
                role: "broker", tasks: $0, key: "k",
                brokerArguments: ["--key-rate-limit", "\(EchoTask.service)=1000000/s:1000000"])
        }
        rows.append(Row(role: Self.keyLimitedBroker, sky: keyLimited))
        return rows
    }

    /// The row of the client making typed calls.
    static let typedClient = "typed client"
    /// The row of the broker whose service has a rate limit.
    static let limitedBroker = "limited broker"
    /// The row of the broker given calls with a concurrency key.
    static let keyedBroker = "keyed broker"
    /// The row of the broker given the same calls, its service under a rate limit per key.
    static let keyLimitedBroker = "key-limited broker"

    /// The report: one line per role, with Sky ÷ baseline, and the typed client ÷ the raw one.
    static func table(
        _ rows: [Row], payload: Int, inFlight: Int, workerHandlers: WorkerPlacement, clientCallers: CallerPlacement
    ) -> String {
        var lines = [
            "User-space instructions per task (callgrind; \(payload) B, \(inFlight) in flight, 1 worker; Sky's handlers on the "
                + "\(workerHandlers.place), its calls on the \(clientCallers.place))",
            "role                Sky          baseline     Sky / baseline",
        ]
        for row in rows {
            let baseline = row.baseline.map { String(format: "%-12.0f %.2f", $0, row.sky / $0) } ?? "-"
            lines.append(
                "\(row.role.padding(toLength: 19, withPad: " ", startingAt: 0)) \(String(format: "%-12.0f", row.sky)) \(baseline)"
            )
        }
        if let raw = rows.first(where: { $0.role == "client" }),
            let typed = rows.first(where: { $0.role == typedClient })
        {
            lines.append(
                "typed client / client (scan of a Codable EchoTask against request of its bytes): "
                    + String(format: "%.2f", typed.sky / raw.sky))
        }
        if let broker = rows.first(where: { $0.role == "broker" }),
            let limited = rows.first(where: { $0.role == limitedBroker })
        {
            lines.append(
                "limited broker / broker (the service under a rate limit that never binds): "
                    + String(format: "%.3f", limited.sky / broker.sky))
        }
        if let keyed = rows.first(where: { $0.role == keyedBroker }),
            let limited = rows.first(where: { $0.role == keyLimitedBroker })
        {
            lines.append(
                "key-limited broker / keyed broker (calls with a key, under a rate limit per key that never binds): "
                    + String(format: "%.3f", limited.sky / keyed.sky))
        }
        return lines.joined(separator: "\n")
    }

    private func perTask(_ total: (Int) async throws -> Int) async throws -> Double {
        let few = try await total(tasks)
        let many = try await total(3 * tasks)
        return Double(many - few) / Double(2 * tasks)
    }

    // MARK: Sky

    private func skyTotal(
        role: String, tasks: Int, typed: Bool = false, key: String? = nil, brokerArguments: [String] = []
    ) async throws -> Int {
        progress("instructions: sky \(typed ? "typed " : "")\(role), \(tasks) tasks under callgrind")
        let output = Self.outputFile()
        defer { try? FileManager.default.removeItem(at: output) }
        let endpoints = transport.endpoints(for: "sky-instructions")
        let started = try await StartedBroker.start(
            clients: endpoints[0], workers: endpoints[1], events: endpoints[2],
            arguments: ["--log-level", "warning"] + brokerArguments,
            launcher: role == "broker" ? callgrind.launcher(output) + [callgrind.broker.path] : [],
            environment: callgrind.environment)
        let broker = started.process
        var processes = [broker]
        defer { for process in processes { process.killNow() } }
        let worker = try Self.process(
            role == "worker" ? callgrind.worker : SkyProcess.binaries.appendingPathComponent("skyworker"),
            [
                "--broker", started.workers, "--capacity", "16", "--workloads", EchoTask.service,
                "--log-level", "warning",
            ] + workerHandlers.arguments, under: role == "worker" ? callgrind.launcher(output) : nil, name: "skyworker",
            environment: role == "worker" ? callgrind.environment : [:])
        processes.append(worker)
        let clients = started.clients
        if role != "client" {
            let client = try await SkyClient(broker: clients)
            try await Self.waitForWorker(client)
            try await Self.load(
                client, tasks: tasks, inFlight: inFlight, payload: payload, callers: clientCallers, typed: false,
                key: key)
            await client.close()
            // A graceful stop ends it through a normal exit, so callgrind writes its counts.
            let counted = role == "broker" ? broker : worker
            counted.signal(SIGTERM)
            guard try await counted.waitForExit(timeout: .seconds(120)) == 0 else {
                throw BenchError("sky\(role) under callgrind did not exit cleanly: \(counted.errorText)")
            }
        } else {
            let launcher = callgrind.launcher(output)
            let client = try SkyProcess(
                program: URL(fileURLWithPath: launcher[0]),
                launcher.dropFirst() + [
                    callgrind.client.path, "--load-client", clients, "--load-tasks", "\(tasks)", "--in-flight",
                    "\(inFlight)", "--payloads", "\(payload)", "--client-callers", clientCallers.rawValue,
                ] + (typed ? ["--load-typed"] : []), name: "skybench-client", environment: callgrind.environment)
            processes.append(client)
            guard try await client.waitForExit(timeout: .seconds(600)) == 0 else {
                throw BenchError("the Sky client under callgrind failed: \(client.errorText)")
            }
        }
        return try Self.total(output)
    }

    /// The hidden `--load-client` mode: this process as a plain Sky client, for callgrind.
    static func loadClient(
        broker: String, tasks: Int, inFlight: Int, payload: Int, callers: CallerPlacement, typed: Bool,
        key: String? = nil
    ) async throws {
        let client = try await SkyClient(broker: broker)
        try await waitForWorker(client)
        try await load(
            client, tasks: tasks, inFlight: inFlight, payload: payload, callers: callers, typed: typed, key: key)
        await client.close()
    }

    /// `tasks` echo requests, `inFlight` at a time: of `payload` bytes, or (`typed`) of an
    /// `EchoTask` whose message is `payload` bytes of text, as the timed runs' typed point makes.
    static func load(
        _ client: SkyClient, tasks: Int, inFlight: Int, payload: Int, callers: CallerPlacement, typed: Bool,
        key: String? = nil
    ) async throws {
        let body = [UInt8](repeating: 0x61, count: payload)
        let options = Self.options(key: key)
        let task = EchoTask(message: String(repeating: "a", count: payload))
        let lanes = max(1, min(inFlight, tasks))
        if callers == .completion {
            // Each lane's calls one after the other, as the task lanes below make them.
            let left = Atomic(tasks - lanes)
            let more: @Sendable () -> Bool = { left.subtract(1, ordering: .relaxed).oldValue > 0 }
            try await CallbackChains.run(lanes: lanes, more: more) { done in
                if typed {
                    client.scan(task, options: options) { done($0.map { _ in [] }) }
                } else {
                    client.request(service: EchoTask.service, body: body, options: options, completion: done)
                }
            }
            return
        }
        try await withTaskExecutorPreference(callers.executor(of: client)) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<lanes {
                    let count = tasks / lanes + (lane < tasks % lanes ? 1 : 0)
                    group.addTask {
                        for _ in 0..<count {
                            if typed {
                                _ = try await client.scan(task, options: options)
                            } else {
                                _ = try await client.request(service: EchoTask.service, body: body, options: options)
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    /// The timed runs' options, with a concurrency key if given.
    private static func options(key: String?) -> ScanOptions {
        var options = SkyTarget.options
        options.concurrencyKey = key
        return options
    }

    static func waitForWorker(_ client: SkyClient) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while try await client.clusterSnapshot().workers.isEmpty {
            guard ContinuousClock.now < deadline else { throw BenchError("no skyworker registered within 120 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    // MARK: Baseline

    private func baselineTotal(role: String, tasks: Int, programs: BaselinePrograms) async throws -> Int {
        progress("instructions: baseline \(role), \(tasks) tasks under callgrind")
        let output = Self.outputFile()
        defer { try? FileManager.default.removeItem(at: output) }
        let endpoints = transport.endpoints(for: "baseline-instructions")
        let broker = try Self.process(
            programs.broker, [endpoints[0], endpoints[1]], under: role == "broker" ? callgrind.launcher(output) : nil,
            name: "baseline-broker")
        var processes = [broker]
        defer { for process in processes { process.killNow() } }
        // "ready FRONT BACK"
        let ready = try await broker.waitForLine(timeout: .seconds(120)) { $0.hasPrefix("ready ") }
            .split(separator: " ")
        guard ready.count == 3 else { throw BenchError("the baseline broker said \(ready)") }
        let worker = try Self.process(
            programs.worker, [String(ready[2]), "16"], under: role == "worker" ? callgrind.launcher(output) : nil,
            name: "baseline-worker")
        processes.append(worker)
        let arguments = [String(ready[1]), "cnt", "\(payload)", "\(inFlight)", "\(tasks)", "-"]
        let client = try Self.process(
            programs.client, arguments, under: role == "client" ? callgrind.launcher(output) : nil,
            name: "baseline-client", environment: programs.clientEnvironment)
        processes.append(client)
        guard try await client.waitForExit(timeout: .seconds(600)) == 0 else {
            throw BenchError("the baseline client failed: \(client.errorText)")
        }
        // SIGTERM makes the C broker and worker return from main, so callgrind writes its counts.
        for (name, process) in [("broker", broker), ("worker", worker)] where role == name {
            process.signal(SIGTERM)
            let status = try await process.waitForExit(timeout: .seconds(120))
            guard status == 0 else {
                throw BenchError(
                    "the baseline \(name) under callgrind did not exit cleanly (status \(status)): \(process.errorText)"
                )
            }
        }
        return try Self.total(output)
    }

    // MARK: callgrind

    /// `program` with `arguments`, under `launcher` if given.
    private static func process(
        _ program: URL, _ arguments: [String], under launcher: [String]?, name: String,
        environment: [String: String] = [:]
    ) throws -> SkyProcess {
        guard let launcher else {
            return try SkyProcess(program: program, arguments, name: name, environment: environment)
        }
        return try SkyProcess(
            program: URL(fileURLWithPath: launcher[0]), launcher.dropFirst() + [program.path] + arguments, name: name,
            environment: environment)
    }

    private static func outputFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("skybench-callgrind-\(UUID().uuidString).out")
    }

    /// The instructions callgrind counted over the whole run (its `summary:` or `totals:` line).
    static func total(_ output: URL) throws -> Int {
        guard let text = try? String(contentsOf: output, encoding: .utf8) else {
            throw BenchError("callgrind wrote no counts to \(output.path)")
        }
        for line in text.split(separator: "\n") where line.hasPrefix("summary:") || line.hasPrefix("totals:") {
            if let value = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) { return value }
        }
        throw BenchError("\(output.path) has no summary line")
    }
}

/// valgrind's callgrind, and what Swift programs need to run under it on Debian 12
/// (valgrind 3.19): copies of `skybroker`, `skyworker` and of this program without their DWARF 5 debug
/// information, which valgrind cannot read, and `ops/valgrind/sigsuspend.c` preloaded (see
/// there).
struct Callgrind: Sendable {
    let valgrind: URL
    let broker: URL
    let worker: URL
    let client: URL
    let preload: URL

    /// Finds valgrind, strip and a C compiler, and prepares the copies in a new temporary folder.
    /// - Parameter root: the repository, for `ops/valgrind/sigsuspend.c`.
    static func prepare(root: URL) async throws -> Callgrind {
        guard let valgrind = executable(named: "valgrind") else {
            throw BenchError("--instructions needs valgrind (Debian: apt-get install valgrind)")
        }
        guard let strip = executable(named: "strip"), let compiler = BaselinePrograms.findCompiler() else {
            throw BenchError("--instructions needs strip and a C compiler (Debian: apt-get install gcc)")
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("skybench-callgrind-\(getpid())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let setup = Callgrind(
            valgrind: valgrind, broker: folder.appendingPathComponent("skybroker"),
            worker: folder.appendingPathComponent("skyworker"), client: folder.appendingPathComponent("skybench"),
            preload: folder.appendingPathComponent("sigsuspend.so"))
        let me = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let steps: [(URL, [String])] = [
            (strip, ["-g", "-o", setup.broker.path, SkyProcess.binaries.appendingPathComponent("skybroker").path]),
            (strip, ["-g", "-o", setup.worker.path, SkyProcess.binaries.appendingPathComponent("skyworker").path]),
            (strip, ["-g", "-o", setup.client.path, me.path]),
            (
                compiler,
                [
                    "-O2", "-shared", "-fPIC", "-o", setup.preload.path,
                    root.appendingPathComponent("ops/valgrind/sigsuspend.c").path,
                ]
            ),
        ]
        for (program, arguments) in steps {
            let step = try SkyProcess(program: program, arguments, name: program.lastPathComponent)
            guard try await step.waitForExit(timeout: .seconds(120)) == 0 else {
                throw BenchError("\(program.path) \(arguments.joined(separator: " ")) failed: \(step.errorText)")
            }
        }
        return setup
    }

    /// valgrind and its options, counting into `output`; the program and its arguments follow.
    func launcher(_ output: URL) -> [String] {
        [valgrind.path, "--tool=callgrind", "--callgrind-out-file=\(output.path)", "--dump-line=no"]
    }

    /// For the Swift programs run under valgrind.
    var environment: [String: String] { ["LD_PRELOAD": preload.path] }

    /// Deletes the copies.
    func remove() {
        try? FileManager.default.removeItem(at: preload.deletingLastPathComponent())
    }
}
