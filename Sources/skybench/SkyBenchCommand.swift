import ArgumentParser
import CSkySystem
import Foundation
import SkyCLISupport
import SkyZMQ

extension Transport: ExpressibleByArgument {}
extension ZMQEventLoop.Scheduling: ExpressibleByArgument {}

@main
struct SkyBenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skybench",
        abstract: "Measures Sky against a plain-libzmq baseline on this machine, in the same run.",
        discussion: """
            For sky.echo with each payload: latency with one request in flight (p50, p99), throughput
            with each --in-flight count, and CPU time per task of every process, against 1 and 2
            workers. The baseline (bench/baseline/*.c: the same client -> broker -> worker flow in C,
            credit-based, no application work) is compiled with the system's C compiler and runs
            alternately with Sky, round after round; the table shows medians and Sky / baseline.
            Then the broker's memory with --queue-memory requests queued, and sky.scan throughput
            for 1 and 2 workers (free-running: CPU-bound work should spread).
            By default every process of the latency and throughput runs is pinned to CPU 0: on a
            small virtual machine that gives stable figures (see docs/performance.md); --free
            lets them run on every core.
            """)

    @Option(parsing: .unconditional, help: "Rounds; each measures both systems at every point.")
    var rounds = 5

    @Option(help: "Comma-separated worker counts.")
    var workers = "1,2"

    @Option(help: "Comma-separated payload sizes in bytes.")
    var payloads = "64,1024"

    @Option(name: .customLong("in-flight"), help: "Comma-separated numbers of requests kept in flight.")
    var inFlight = "1,16,64,256"

    @Option(
        parsing: .unconditional, help: "Credits per worker (skyworker --capacity; the baseline worker's READY credits)."
    )
    var capacity = 16

    @Option(
        name: .customLong("worker-handlers"),
        help: ArgumentHelp(
            "Where Sky's workers run the echo: pool or io-thread (skyworker --handlers), or inline (--inline-echo: the I/O thread runs it, with no task).",
            valueName: "pool|io-thread|inline"))
    var workerHandlers = WorkerPlacement.pool

    @Option(
        name: .customLong("client-callers"),
        help: ArgumentHelp(
            "Where the measuring calls run: pool, io-thread (withTaskExecutorPreference(client.ioThreadExecutor)), or completion (the callback API, each completion starting the next call).",
            valueName: "pool|io-thread|completion"))
    var clientCallers = CallerPlacement.pool

    @Option(parsing: .unconditional, help: "Timed round trips per latency measurement.")
    var latencyRequests = 5000

    @Option(parsing: .unconditional, help: "Untimed round trips before them.")
    var latencyWarmup = 500

    @Option(parsing: .unconditional, help: "Seconds of each throughput measurement before counting starts.")
    var warmup = 0.2

    @Option(parsing: .unconditional, help: "Seconds counted in each throughput measurement.")
    var measure = 0.8

    @Option(help: "tcp or ipc.")
    var transport = Transport.tcp

    @Flag(help: "Do not pin the latency and throughput runs to CPU 0.")
    var free = false

    @Flag(help: "Measure Sky alone.")
    var noBaseline = false

    @Option(help: "The baseline's C sources (default: bench/baseline of this checkout).")
    var baselineSource: String?

    @Option(help: "Where the baseline is compiled to (default: bench/build beside the sources).")
    var baselineBuild: String?

    @Option(
        parsing: .unconditional,
        help: """
            Small frames the baseline adds to every message (0 to 4). With 4 its messages carry as \
            many frames as Sky's protocol does: what the frame count alone costs in libzmq.
            """)
    var baselineExtraFrames = 0

    @Option(
        help: """
            The kernel's policy for every thread of the baseline's processes: normal (as a C \
            program gets it) or batch (SCHED_BATCH, through chrt: what Sky's I/O threads run \
            under, unless SKY_IO_THREAD_SCHEDULING=normal).
            """)
    var baselineScheduling = ZMQEventLoop.Scheduling.normal

    @Option(parsing: .unconditional, help: "Requests queued for the broker memory measurement (0 skips it).")
    var queueMemory = 100_000

    @Option(parsing: .unconditional, help: "sky.scan tasks per scaling measurement (0 skips it).")
    var scanTasks = 2000

    @Option(help: "Also write the report as JSON to this file.")
    var json: String?

    @Flag(
        help: """
            Instead of the timed runs: user-space instructions per task of the broker, the client \
            and the worker, Sky against the baseline, counted by valgrind's callgrind (first \
            payload, largest --in-flight, one worker).
            """)
    var instructions = false

    @Flag(
        help: """
            Instead of the timed runs: durable jobs (submit latency, jobs per second from submit to \
            recorded result, scan beside a durable load, journal bytes per job), and with the \
            baseline the floor under "scan beside a durable load": the C chain beside the least a \
            durable job costs in C.
            """)
    var jobs = false

    @Option(parsing: .unconditional, help: "Jobs per end-to-end measurement of --jobs.")
    var jobCount = 20_000

    @Option(
        help: ArgumentHelp(
            "With --jobs: also measure the broker with the jobs on this PostgreSQL store (skybroker --store), after SQLite, and print both.",
            valueName: "postgresql://…"))
    var store: String?

    @Flag(
        help: ArgumentHelp(
            "With --jobs: every fixed phase at a tenth of its requests or a quarter of its time, to check that the mode works (the test suite's smoke test), not to measure."
        ))
    var smoke = false

    @Option(
        parsing: .unconditional,
        help: "Requests of the smaller of the two runs --instructions counts (the larger has 3x).")
    var instructionTasks = 2000

    @Flag(
        help: """
            Instead of the timed runs: system calls per task of the broker, the client and the \
            worker, Sky against the baseline, counted by perf trace (first payload, largest \
            --in-flight, one worker). The timed runs end with these counts too (--syscall-tasks).
            """)
    var syscalls = false

    @Option(
        parsing: .unconditional,
        help:
            "Requests of the smaller of the two runs the system-call counts take (the larger has 3x); 0 leaves them out of the timed runs."
    )
    var syscallTasks = 5000

    @Option(help: ArgumentHelp("Run as a plain client of this broker (for --instructions).", visibility: .private))
    var loadClient: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Requests --load-client makes.", visibility: .private))
    var loadTasks = 1000

    @Flag(help: ArgumentHelp("--load-client makes typed scan(EchoTask) calls.", visibility: .private))
    var loadTyped = false

    @Option(
        help: ArgumentHelp(
            "--load-client's calls carry this concurrency key (to profile the keyed broker).", visibility: .private))
    var loadKey: String?

    @Option(
        help: ArgumentHelp(
            "Submit --jobs' paced durable load to this broker until SIGTERM (its other-process phase).",
            visibility: .private))
    var pacedJobs: String?

    func validate() throws {
        try FlagCheck.integer(rounds, "--rounds", in: 1...1000)
        try FlagCheck.integer(capacity, "--capacity", in: 1...65_536)
        try FlagCheck.integer(latencyRequests, "--latency-requests", in: 1...10_000_000)
        try FlagCheck.integer(latencyWarmup, "--latency-warmup", in: 0...10_000_000)
        try FlagCheck.seconds(warmup, "--warmup", in: 0...3600)
        try FlagCheck.seconds(measure, "--measure", in: 0.001...3600)
        for (name, list) in [("--workers", workers), ("--payloads", payloads), ("--in-flight", inFlight)] {
            guard let values = Self.integers(list), !values.isEmpty, values.allSatisfy({ (1...1_000_000).contains($0) })
            else {
                throw ValidationError("\(name) takes comma-separated whole numbers in 1...1000000, not \(list)")
            }
        }
        try FlagCheck.integer(queueMemory, "--queue-memory", in: 0...10_000_000)
        try FlagCheck.integer(scanTasks, "--scan-tasks", in: 0...10_000_000)
        try FlagCheck.integer(instructionTasks, "--instruction-tasks", in: 1...1_000_000)
        try FlagCheck.integer(syscallTasks, "--syscall-tasks", in: 0...1_000_000)
        try FlagCheck.integer(loadTasks, "--load-tasks", in: 1...10_000_000)
        try FlagCheck.integer(jobCount, "--job-count", in: 1...10_000_000)
        try FlagCheck.integer(baselineExtraFrames, "--baseline-extra-frames", in: 0...4)
    }

    static func integers(_ list: String) -> [Int]? {
        let values = list.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        return values.contains(nil) ? nil : values.compactMap { $0 }
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        let payload = Self.integers(payloads)?.first ?? 64
        let mostInFlight = Self.integers(inFlight)?.max() ?? 256
        if let pacedJobs {
            try await JobBench.pacedLoad(broker: pacedJobs)
            return
        }
        if let loadClient {
            try await InstructionCount.loadClient(
                broker: loadClient, tasks: loadTasks, inFlight: mostInFlight, payload: payload, callers: clientCallers,
                typed: loadTyped, key: loadKey)
            return
        }
        let settings = BenchSettings(
            rounds: rounds, workerCounts: Self.integers(workers) ?? [1], payloads: Self.integers(payloads) ?? [64],
            inFlight: Self.integers(inFlight) ?? [1], capacity: capacity, workerHandlers: workerHandlers,
            clientCallers: clientCallers,
            latencyRequests: latencyRequests,
            latencyWarmup: latencyWarmup, warmupSeconds: warmup, measureSeconds: measure, transport: transport,
            pinned: !free, baseline: !noBaseline, queueMemoryRequests: queueMemory, scanScaling: scanTasks > 0,
            scanTasks: scanTasks, baselineExtraFrames: baselineExtraFrames, baselineScheduling: baselineScheduling)
        var programs: BaselinePrograms?
        if settings.baseline {
            let source = try baselineSourceDirectory()
            let build =
                baselineBuild.map { URL(fileURLWithPath: $0) }
                ?? source.deletingLastPathComponent()
                .appendingPathComponent("build")
            programs = try await BaselinePrograms.build(source: source, into: build, extraFrames: baselineExtraFrames)
            programs?.scheduling = baselineScheduling
        }
        if jobs {
            var bench = JobBench(
                workers: Self.integers(workers)?.max() ?? 1, capacity: capacity, transport: transport,
                baseline: programs, jobs: jobCount, inFlight: mostInFlight, rounds: rounds)
            if smoke { bench.shrinkForSmoke() }
            guard let store else {
                let results = try await bench.run()
                print(JobBench.table(results))
                try write(results)
                return
            }
            // SQLite first, then the store: both in one run, on one machine's state, so that the
            // figures compare.
            let sqlite = try await bench.run()
            bench.store = store
            let pair = JobBench.StorePair(sqlite: sqlite, postgresql: try await bench.run())
            print(pair.table)
            try write(pair)
            return
        }
        if instructions {
            let root = try baselineSourceDirectory().deletingLastPathComponent().deletingLastPathComponent()
            let callgrind = try await Callgrind.prepare(root: root)
            let count = InstructionCount(
                baseline: programs, callgrind: callgrind, tasks: instructionTasks, payload: payload,
                inFlight: mostInFlight, transport: transport, workerHandlers: workerHandlers,
                clientCallers: clientCallers)
            let rows: [InstructionCount.Row]
            do {
                rows = try await count.run()
                callgrind.remove()
            } catch {
                callgrind.remove()
                throw error
            }
            print(
                InstructionCount.table(
                    rows, payload: payload, inFlight: mostInFlight, workerHandlers: workerHandlers,
                    clientCallers: clientCallers))
            if programs != nil, baselineExtraFrames > 0 { print(Report.extraFramesNote(baselineExtraFrames)) }
            try write(rows)
            return
        }
        if syscalls {
            let rows = try await countSyscalls(
                programs, payload: payload, inFlight: mostInFlight, tasks: max(1, syscallTasks))
            try write(rows)
            return
        }
        let run = BenchRun(settings: settings, baseline: programs)
        let report = try await run.run()
        print(report.table())
        try write(report)
        if syscallTasks > 0 {
            print("")
            _ = try await countSyscalls(programs, payload: payload, inFlight: mostInFlight, tasks: syscallTasks)
        }
    }

    /// Counts system calls per task (``SyscallCount``) and prints them; says why not if perf is
    /// missing.
    private func countSyscalls(
        _ programs: BaselinePrograms?, payload: Int, inFlight: Int, tasks: Int
    ) async throws -> [SyscallCount.Row] {
        guard let perf = SyscallCount.findPerf() else {
            print("System calls per task: not counted, perf is missing (Debian: apt-get install linux-perf)")
            return []
        }
        let count = SyscallCount(
            perf: perf, baseline: programs, tasks: tasks, payload: payload, inFlight: inFlight, transport: transport,
            workerHandlers: workerHandlers, clientCallers: clientCallers)
        let rows = try await count.run()
        print(SyscallCount.table(rows, payload: payload, inFlight: inFlight))
        return rows
    }

    private func write(_ value: some Encodable) throws {
        guard let json else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(value).write(to: URL(fileURLWithPath: json))
        print("\nJSON written to \(json)")
    }

    /// `--baseline-source`, or `bench/baseline` found above this executable or the working directory.
    private func baselineSourceDirectory() throws -> URL {
        if let baselineSource { return URL(fileURLWithPath: baselineSource) }
        let starts = [
            URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent(),
            URL(fileURLWithPath: FileManager.default.currentDirectoryPath),
        ]
        for start in starts {
            var directory = start
            while directory.path != "/" {
                let candidate = directory.appendingPathComponent("bench/baseline")
                if FileManager.default.fileExists(atPath: candidate.appendingPathComponent("broker.c").path) {
                    return candidate
                }
                directory.deleteLastPathComponent()
            }
        }
        throw BenchError(
            "cannot find bench/baseline/*.c above \(starts.map(\.path).joined(separator: " or ")); pass --baseline-source DIR or --no-baseline"
        )
    }
}
