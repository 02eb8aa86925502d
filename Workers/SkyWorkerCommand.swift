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
            tasks it holds, tells the broker, and exits 0.
            """)

    @Option(help: "The broker's workers endpoint.")
    var broker = "tcp://127.0.0.1:5556"

    @Option(help: "Worker name shown in events (default: host-pid).")
    var name: String?

    @Option(help: "Tasks run at once.")
    var capacity = 4

    @Option(help: "Comma-separated built-in workloads to serve.")
    var workloads = BuiltInWorkloads.all.joined(separator: ",")

    @OptionGroup var common: CommonOptions

    func validate() throws {
        guard (1...65_536).contains(capacity) else { throw ValidationError("--capacity must be 1...65536") }
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skyworker", options: common)
        let workerName = name ?? SkyWorker.defaultName
        let system = ScanSystem(name: workerName, capacity: capacity)
        do {
            let names = workloads.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            try await BuiltInWorkloads.register(names, on: system)
        } catch {
            ProcessSetup.fail("skyworker", "\(error)")
        }
        let worker = SkyWorker(configuration: .init(broker: broker), system: system, logger: logger)
        ProcessSetup.line("skyworker ready name=\(workerName) capacity=\(capacity) broker=\(broker)")
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: worker)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}
