import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyCLISupport
import SkyProtocol
import SkyWire
import SkyWorkerKit
import UnixSignals

extension HandlerExecutor: ExpressibleByArgument {}

/// Every flag of `skyworker` (broker, name, capacity, heartbeats, drain grace, where handlers
/// run, metrics endpoint, trace log, log level, CURVE keys) for a worker of your own, as an
/// ArgumentParser option group, and what `skyworker` does with them in ``run(program:register:)``:
///
/// ```swift
/// @main
/// struct Thumbnails: AsyncParsableCommand {
///     @OptionGroup var worker: WorkerOptions
///
///     func run() async throws {
///         try await worker.run { system in
///             await system.register(Thumbnail.self) { task in try await render(task) }
///         }
///     }
/// }
/// ```
///
/// A separate product (`SkyWorkerCLI`) so that a worker that takes its settings elsewhere does
/// not pull in ArgumentParser, the metrics endpoint's HTTP server and Prometheus: it builds a
/// `SkyWorker` from `SkyWorkerKit` alone.
public struct WorkerOptions: ParsableArguments {
    /// Flag defaults come from the library's configuration types (one fact, one place).
    private static let defaults = SkyWorker.Configuration()

    @Option(
        help: ArgumentHelp(
            "The broker's workers endpoint; for an active broker and its standbys on one job store, each one's, separated by commas (the worker follows the active one).",
            valueName: "endpoint[,endpoint…]"))
    public var broker = Self.defaults.broker

    @Option(help: "Worker name shown in events (default: host-pid).")
    public var name: String?

    @Option(parsing: .unconditional, help: "Tasks run at once (by default, this machine's number of cores).")
    public var capacity = ProcessInfo.processInfo.activeProcessorCount

    @Option(
        parsing: .unconditional,
        help: "Seconds between heartbeats with the broker, until it says its own (which the worker then uses).")
    public var heartbeatInterval: Double = Self.defaults.liveness.heartbeatInterval.inSeconds

    @Option(
        parsing: .unconditional,
        help: "Missed heartbeat intervals before the broker is presumed lost and the worker reconnects.")
    public var liveness = Self.defaults.liveness.liveness

    @Option(parsing: .unconditional, help: "Seconds a graceful stop waits for running tasks before handing them back.")
    public var drainGrace: Double = Self.defaults.drainGrace.inSeconds

    @Option(
        help: ArgumentHelp(
            "Where handlers run: pool (Swift's cooperative pool, for any handler) or io-thread (the worker's I/O thread: fewer thread wake-ups a task, for short or awaiting handlers only; a handler that computes holds up heartbeats).",
            valueName: "pool|io-thread"))
    public var handlers: HandlerExecutor = Self.defaults.handlerExecutor

    @OptionGroup var metrics: MetricsOptions

    @OptionGroup var traceLog: TraceLogOptions

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    public init() {}

    public func validate() throws {
        try FlagCheck.endpointList(broker, "--broker")
        try FlagCheck.integer(capacity, "--capacity", in: 1...Int(WorkerToBroker.maxCapacity))
        try FlagCheck.seconds(heartbeatInterval, "--heartbeat-interval", in: 0.01...3600)
        try FlagCheck.integer(liveness, "--liveness", in: 1...1000)
        try FlagCheck.seconds(drainGrace, "--drain-grace", in: 0...86_400)
        if let name, let problem = WireFormat.nameProblem(name, what: "--name") {
            throw ValidationError(problem)
        }
    }

    /// The worker's name: `--name`, or host-pid.
    public var workerName: String { name ?? SkyWorker.defaultName }

    /// Runs the worker as `skyworker` does, until SIGTERM or SIGINT has drained it: sets up
    /// logging at `--log-level`, lets `register` put the handlers on a `ScanSystem` of
    /// `--capacity`, starts the metrics endpoint and the trace log if asked, prints
    /// "`program` ready name=… capacity=… broker=… [metrics=…]" once a broker answered, and exits 1 with
    /// one line naming `program` if the worker cannot start (a second signal exits at once).
    /// A process-wide setup: call it once, from your executable's `run`.
    /// - Parameters:
    ///   - program: the name its lines start with; the executable's file name by default.
    ///   - register: registers the handlers (a worker with none refuses to start).
    public func run(
        program: String = WorkerOptions.programName, register: @Sendable (ScanSystem) async throws -> Void
    ) async throws {
        let logger = ProcessSetup.prepare(label: program, options: common)
        let system = ScanSystem(name: workerName, capacity: capacity)
        do {
            try await register(system)
        } catch {
            ProcessSetup.fail(program, "\(error)")
        }
        var liveness = BrokerLiveness.Configuration()
        liveness.heartbeatInterval = FlagCheck.duration(seconds: heartbeatInterval)
        liveness.liveness = self.liveness
        var configuration = SkyWorker.Configuration(
            brokers: FlagCheck.endpoints(broker), liveness: liveness,
            drainGrace: FlagCheck.duration(seconds: drainGrace),
            credentials: curve.credentials(program: program), handlerExecutor: handlers)
        let metricsURL = await metrics.start(program: program)
        let traceLog = traceLog.start(program: program)
        defer { traceLog?.flush() }
        let line =
            "\(program) ready name=\(workerName) capacity=\(capacity) broker=\(broker)"
            + (metricsURL.map { " metrics=\($0)" } ?? "")
        configuration.onStarted = { ProcessSetup.readyLine(line) }
        let worker = SkyWorker(configuration: configuration, system: system, logger: logger)
        Task {
            // The first signal starts the drain (ServiceGroup); a second one ends it now.
            var seen = 0
            for await signal in await UnixSignalsSequence(trapping: .sigterm, .sigint) {
                seen += 1
                if seen >= 2 {
                    logger.warning(
                        "second signal: exiting without finishing the drain", metadata: ["signal": "\(signal)"])
                    Foundation.exit(1)
                }
            }
        }
        await ProcessSetup.serveUntilSignalled(worker, program: program, logger: logger)
    }

    /// The executable's file name.
    public static var programName: String {
        CommandLine.arguments.first.map { URL(fileURLWithPath: $0).lastPathComponent } ?? "worker"
    }
}
