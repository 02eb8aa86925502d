import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SkyCLISupport
import SkyWorkerKit
import SkyWorkloads
import UnixSignals

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

    @Option(help: "The broker's workers endpoint.")
    var broker = "tcp://127.0.0.1:5556"

    @Option(help: "Worker name shown in events (default: host-pid).")
    var name: String?

    @Option(help: "Tasks run at once (default: the number of cores).")
    var capacity = ProcessInfo.processInfo.activeProcessorCount

    @Option(help: "Comma-separated built-in workloads to serve.")
    var workloads = BuiltInWorkloads.all.joined(separator: ",")

    @Option(help: "Seconds between heartbeats with the broker (match the broker's).")
    var heartbeatInterval: Double = 1

    @Option(help: "Missed heartbeat intervals before the broker is presumed lost and the worker reconnects.")
    var liveness = 3

    @Option(help: "Seconds a graceful stop waits for running tasks before handing them back.")
    var drainGrace: Double = 30

    @Option(help: "sky.flaky fails every this many calls.")
    var flakyEvery = 3

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        guard (1...65_536).contains(capacity) else { throw ValidationError("--capacity must be 1...65536") }
        guard heartbeatInterval >= 0.01 else { throw ValidationError("--heartbeat-interval must be at least 0.01") }
        guard liveness >= 1 else { throw ValidationError("--liveness must be at least 1") }
        guard drainGrace >= 0 else { throw ValidationError("--drain-grace must be 0 or more") }
        guard flakyEvery >= 1 else { throw ValidationError("--flaky-every must be at least 1") }
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skyworker", options: common)
        let workerName = name ?? SkyWorker.defaultName
        let system = ScanSystem(name: workerName, capacity: capacity)
        do {
            let names = workloads.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            try await BuiltInWorkloads.register(names, on: system, flakyEvery: flakyEvery)
        } catch {
            ProcessSetup.fail("skyworker", "\(error)")
        }
        var liveness = BrokerLiveness.Configuration()
        liveness.heartbeatInterval = .milliseconds(Int64(heartbeatInterval * 1000))
        liveness.liveness = self.liveness
        let worker = SkyWorker(
            configuration: .init(
                broker: broker, liveness: liveness, drainGrace: .milliseconds(Int64(drainGrace * 1000)),
                credentials: curve.credentials(program: "skyworker")),
            system: system, logger: logger)
        ProcessSetup.line("skyworker ready name=\(workerName) capacity=\(capacity) broker=\(broker)")
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
        try await group.run()
    }
}
