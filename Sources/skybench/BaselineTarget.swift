import Foundation
import SkyProtocol
import SkyTestSupport
import SkyWire
import SkyZMQ

/// The plain-libzmq baseline under test: `bench/baseline/broker.c` and `workers` ×
/// `worker.c` with `credits` credits each; every measurement runs `client.c` in a process of
/// its own, which samples the CPU of every process over its measured phase.
final class BaselineTarget: BenchTarget {
    let system = BenchSystem.baseline
    private let programs: BaselinePrograms
    private let broker: SkyProcess
    private let workers: [SkyProcess]
    private let clientsEndpoint: String

    private init(programs: BaselinePrograms, broker: SkyProcess, workers: [SkyProcess], clientsEndpoint: String) {
        self.programs = programs
        self.broker = broker
        self.workers = workers
        self.clientsEndpoint = clientsEndpoint
    }

    static func start(
        programs: BaselinePrograms, workers count: Int, credits: Int, transport: Transport
    ) async throws -> BaselineTarget {
        let endpoints = transport.endpoints(for: "baseline")
        let broker = try programs.launch(programs.broker, [endpoints[0], endpoints[1]], name: "baseline-broker")
        var workers: [SkyProcess] = []
        do {
            // "ready FRONT BACK"
            let ready = try await broker.waitForLine { $0.hasPrefix("ready ") }.split(separator: " ")
            guard ready.count == 3 else { throw BenchError("the baseline broker said \(ready)") }
            for index in stride(from: 1, through: count, by: 1) {
                workers.append(
                    try programs.launch(
                        programs.worker, [String(ready[2]), "\(credits)"], name: "baseline-worker-\(index)"))
            }
            let target = BaselineTarget(
                programs: programs, broker: broker, workers: workers, clientsEndpoint: String(ready[1]))
            // The workers' READY may still be on its way; a request sent before it only waits.
            _ = try await target.latency(payload: 1, requests: 1, warmup: 0)
            return target
        } catch {
            for process in [broker] + workers { process.killNow() }
            throw error
        }
    }

    func latency(payload: Int, requests: Int, warmup: Int) async throws -> Figures {
        try await runClient(["lat", "\(payload)", "\(requests)", "\(warmup)"])
    }

    func throughput(payload: Int, inFlight: Int, warmup: Duration, measure: Duration) async throws -> Figures {
        try await runClient([
            "thr", "\(payload)", "\(inFlight)", "\(warmup.wholeMilliseconds)", "\(measure.wholeMilliseconds)",
        ])
    }

    /// The client's one JSON line.
    private struct ClientReport: Decodable {
        /// Frames in each of its messages, as the client sent and checked them.
        var frames: Int?
        var count: Int?
        var completed: Int?
        var elapsed: Double
        var p50: Double?
        var p99: Double?
        var cpu: [String: Double]
        var switches: [String: Int]
    }

    /// Starts `client.c`'s paced mode: `perSecond` jobs a second, each `recordBytes` written to
    /// `file` and fsync'd, then one request of `payload` bytes through the chain, until
    /// ``stopPaced(_:)``.
    func startPaced(payload: Int, perSecond: Int, file: URL, recordBytes: Int) throws -> SkyProcess {
        try startClient(["paced", "\(payload)", "\(perSecond)", file.path, "\(recordBytes)"])
    }

    /// Stops the paced load; its figures count the jobs answered and its own CPU.
    func stopPaced(_ client: SkyProcess) async throws -> Figures {
        client.signal(SIGTERM)
        return try await figures(of: client, ["paced"])
    }

    private func runClient(_ arguments: [String]) async throws -> Figures {
        try await figures(of: try startClient(arguments + [pidList]), arguments)
    }

    private var roles: [String: pid_t] {
        var roles = ["broker": broker.pid]
        for (index, worker) in workers.enumerated() { roles["worker-\(index + 1)"] = worker.pid }
        return roles
    }

    private var pidList: String { roles.values.map(String.init).joined(separator: ",") }

    private func startClient(_ arguments: [String]) throws -> SkyProcess {
        try programs.launch(
            programs.client, [clientsEndpoint] + arguments, name: "baseline-client",
            environment: programs.clientEnvironment)
    }

    /// Waits for the client's exit and reads its one JSON line.
    private func figures(of client: SkyProcess, _ arguments: [String]) async throws -> Figures {
        let status = try await client.waitForExit(timeout: .seconds(120))
        guard status == 0, let line = client.outputLines.last,
            let report = try? JSONDecoder().decode(ClientReport.self, from: Data(line.utf8))
        else {
            throw BenchError(
                "the baseline client \(arguments.joined(separator: " ")) failed (status \(status)): \(client.errorText)"
            )
        }
        guard report.frames == 2 + programs.extraFrames else {
            throw BenchError(
                "the baseline client sent \(report.frames.map(String.init) ?? "an unknown number of") frames per message, not \(2 + programs.extraFrames) (--baseline-extra-frames \(programs.extraFrames))"
            )
        }
        var cpuSeconds: [String: Double] = [:]
        let roleOfPid = Dictionary(uniqueKeysWithValues: roles.map { ("\($0.value)", $0.key) })
        for (pid, seconds) in report.cpu { cpuSeconds[roleOfPid[pid] ?? "client"] = seconds }
        var switches: [String: Int] = [:]
        for (pid, count) in report.switches { switches[roleOfPid[pid] ?? "client"] = count }
        return Figures(
            tasks: report.count ?? report.completed ?? 0, seconds: report.elapsed, p50: report.p50, p99: report.p99,
            cpuSeconds: cpuSeconds, switches: switches)
    }

    func stop() async {
        await SkyProcess.killAll(workers + [broker])
    }
}

/// The baseline's three programs, compiled from `bench/baseline` with the system's C compiler.
struct BaselinePrograms: Sendable {
    var broker: URL
    var worker: URL
    var client: URL
    /// The compiler's first line of `--version`, for the report.
    var compiler: String
    /// How many small frames the client adds to every message (`client.c` explains).
    var extraFrames = 0
    var clientEnvironment: [String: String] { ["SKY_BASELINE_EXTRA_FRAMES": "\(extraFrames)"] }
    /// The kernel's policy for every thread of the baseline's processes (`--baseline-scheduling`).
    var scheduling = ZMQEventLoop.Scheduling.normal

    /// Starts one of the programs, under `chrt --batch 0` for ``scheduling`` `batch` (its
    /// threads, libzmq's included, inherit the policy).
    func launch(
        _ program: URL, _ arguments: [String], name: String, environment: [String: String] = [:]
    ) throws -> SkyProcess {
        guard scheduling == .batch else {
            return try SkyProcess(program: program, arguments, name: name, environment: environment)
        }
        return try SkyProcess(
            program: URL(fileURLWithPath: "/usr/bin/chrt"), ["--batch", "0", program.path] + arguments, name: name,
            environment: environment)
    }

    /// Compiles the sources in `source` into `build` (again only when a source is newer).
    static func build(source: URL, into build: URL, extraFrames: Int = 0) async throws -> BaselinePrograms {
        guard let compiler = findCompiler() else {
            throw BenchError("no C compiler found (tried $CC, cc, gcc, clang); install gcc or pass --no-baseline")
        }
        try FileManager.default.createDirectory(at: build, withIntermediateDirectories: true)
        let names = ["broker", "worker", "client"]
        let header = source.appendingPathComponent("common.h")
        for name in names {
            let input = source.appendingPathComponent("\(name).c")
            let output = build.appendingPathComponent("sky-baseline-\(name)")
            guard FileManager.default.fileExists(atPath: input.path) else {
                throw BenchError(
                    "\(input.path) is missing; pass --baseline-source DIR (the repository's bench/baseline)")
            }
            if modified(output) >= max(modified(input), modified(header)) { continue }
            let cc = try SkyProcess(
                program: compiler, ["-O2", "-Wall", "-o", output.path, input.path, "-lzmq"], name: "cc-\(name)")
            guard try await cc.waitForExit(timeout: .seconds(120)) == 0 else {
                throw BenchError("compiling \(input.path) failed:\n\(cc.errorText)")
            }
        }
        let version = try SkyProcess(program: compiler, ["--version"], name: "cc-version")
        _ = try await version.waitForExit()
        return BaselinePrograms(
            broker: build.appendingPathComponent("sky-baseline-broker"),
            worker: build.appendingPathComponent("sky-baseline-worker"),
            client: build.appendingPathComponent("sky-baseline-client"),
            compiler: version.outputLines.first ?? compiler.lastPathComponent, extraFrames: extraFrames)
    }

    private static func modified(_ url: URL) -> Date {
        ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.modificationDate] as? Date) ?? .distantPast
    }

    static func findCompiler() -> URL? {
        let names = [ProcessInfo.processInfo.environment["CC"], "cc", "gcc", "clang"].compactMap { $0 }
        for name in names where !name.isEmpty {
            if name.hasPrefix("/") { return URL(fileURLWithPath: name) }
            if let found = executable(named: name) { return found }
        }
        return nil
    }
}

/// The program `name` in a folder of `$PATH`, if there is one.
func executable(named name: String) -> URL? {
    let path = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
    return path.map { URL(fileURLWithPath: "\($0)/\(name)") }.first {
        FileManager.default.isExecutableFile(atPath: $0.path)
    }
}
