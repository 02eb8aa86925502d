import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyCLISupport
import SkyProtocol
import SkyWorkerKit
import SkyWorkloads
import UnixSignals

extension HandlerExecutor: ExpressibleByArgument {}

@main
struct SkyWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skyworker",
        abstract: "Runs Sky tasks for a broker: the built-in workloads, up to --capacity at once.",
        discussion: """
            Connects to the broker's workers endpoint and serves the chosen built-in workloads
            (\(BuiltInWorkloads.all.joined(separator: ", "))). SIGTERM or SIGINT finishes the
            tasks it holds (for at most --drain-grace seconds; the broker gets no new tasks for it
            meanwhile and runs unfinished ones elsewhere), disconnects, and exits 0. A second signal
            exits at once.
            """)

    /// Flag defaults come from the library's configuration types (one fact, one place).
    private static let defaults = SkyWorker.Configuration()

    @Option(help: "The broker's workers endpoint.")
    var broker = Self.defaults.broker

    @Option(help: "Worker name shown in events (default: host-pid).")
    var name: String?

    @Option(help: "Tasks run at once (default: the number of cores).")
    var capacity = ProcessInfo.processInfo.activeProcessorCount

    @Option(help: "Comma-separated built-in workloads to serve.")
    var workloads = BuiltInWorkloads.all.joined(separator: ",")

    @Option(help: "Seconds between heartbeats with the broker (match the broker's).")
    var heartbeatInterval: Double = Self.defaults.liveness.heartbeatInterval.inSeconds

    @Option(help: "Missed heartbeat intervals before the broker is presumed lost and the worker reconnects.")
    var liveness = Self.defaults.liveness.liveness

    @Option(help: "Seconds a graceful stop waits for running tasks before handing them back.")
    var drainGrace: Double = Self.defaults.drainGrace.inSeconds

    @Option(
        help: ArgumentHelp(
            "Where handlers run: pool (Swift's cooperative pool, for any handler) or io-thread (the worker's I/O thread: fewer thread wake-ups a task, for short or awaiting handlers only; a handler that computes holds up heartbeats).",
            valueName: "pool|io-thread"))
    var handlers: HandlerExecutor = Self.defaults.handlerExecutor

    @Option(help: "sky.flaky fails every this many calls.")
    var flakyEvery = 3

    @OptionGroup var metricsOptions: MetricsOptions

    @OptionGroup var traceLogOptions: TraceLogOptions

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        try FlagCheck.endpoint(broker, "--broker")
        try FlagCheck.integer(capacity, "--capacity", in: 1...Int(WorkerToBroker.maxCapacity))
        try FlagCheck.seconds(heartbeatInterval, "--heartbeat-interval", in: 0.01...3600)
        try FlagCheck.integer(liveness, "--liveness", in: 1...1000)
        try FlagCheck.seconds(drainGrace, "--drain-grace", in: 0...86_400)
        try FlagCheck.integer(flakyEvery, "--flaky-every", in: 1...1_000_000_000)
        if let name, let problem = WireFormat.nameProblem(name, what: "--name") {
            throw ValidationError(problem)
        }
        // Named here, at parse time: an empty list ended in "register at least one handler",
        // advice for the library.
        guard !workloadNames.isEmpty else {
            throw ValidationError(
                "--workloads names no workload; choose from \(BuiltInWorkloads.all.joined(separator: ", "))")
        }
        if let unknown = workloadNames.first(where: { !BuiltInWorkloads.all.contains($0) }) {
            throw ValidationError("--workloads: \(BuiltInWorkloads.UnknownWorkload(name: unknown))")
        }
    }

    /// The workloads `--workloads` names, trimmed, without empty entries.
    private var workloadNames: [String] {
        workloads.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skyworker", options: common)
        let workerName = name ?? SkyWorker.defaultName
        let system = ScanSystem(name: workerName, capacity: capacity)
        do {
            try await BuiltInWorkloads.register(workloadNames, on: system, flakyEvery: flakyEvery)
        } catch {
            ProcessSetup.fail("skyworker", "\(error)")
        }
        var liveness = BrokerLiveness.Configuration()
        liveness.heartbeatInterval = FlagCheck.duration(seconds: heartbeatInterval)
        liveness.liveness = self.liveness
        var configuration = SkyWorker.Configuration(
            broker: broker, liveness: liveness, drainGrace: FlagCheck.duration(seconds: drainGrace),
            credentials: curve.credentials(program: "skyworker"), handlerExecutor: handlers)
        let metricsURL = await metricsOptions.start(program: "skyworker")
        let traceLog = traceLogOptions.start(program: "skyworker")
        defer { traceLog?.flush() }
        let line =
            "skyworker ready name=\(workerName) capacity=\(capacity) broker=\(broker)"
            + (metricsURL.map { " metrics=\($0)" } ?? "")
        configuration.onStarted = { ProcessSetup.readyLine(line) }
        let worker = SkyWorker(configuration: configuration, system: system, logger: logger)
        Task {
            // The first signal starts the drain (ServiceGroup); a second one ends it now.
            var seen = 0
            for await signal in await UnixSignalsSequence(trapping: .sigterm, .sigint) {
                seen += 1
                if seen >= 2 {
                    logger.warning("second \(signal): exiting without finishing the drain")
                    Foundation.exit(1)
                }
            }
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: worker)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            // One line and exit 1, as every failure at start; thrown out of `run` it would read
            // "Error: ..." without the program's name.
            ProcessSetup.fail("skyworker", "\(error)")
        }
    }
}
