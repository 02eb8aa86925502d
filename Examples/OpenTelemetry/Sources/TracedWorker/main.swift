import Foundation
import Logging
import OTel
import ServiceLifecycle
import SkyWorkerKit

// Spans go to an OpenTelemetry collector over OTLP (http://localhost:4318 by default; the
// standard OTEL_* environment variables change it). Bootstrap before the worker starts: the
// worker reads the process's tracer once.
func run() async throws {
    var otel = OTel.Configuration.default
    otel.serviceName = "sky-worker"
    let observability = try OTel.bootstrap(configuration: otel)

    let logger = Logger(label: "traced-worker")
    let system = ScanSystem(name: "traced-worker", capacity: 4)
    try await BuiltInWorkloads.register(["sky.scan", "sky.echo"], on: system)
    let worker = SkyWorker(
        configuration: SkyWorker.Configuration(broker: CommandLine.arguments.dropFirst().first ?? "tcp://127.0.0.1:5556"),
        system: system, logger: logger)
    try await ServiceGroup(
        services: [observability, worker], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger
    ).run()
}

// One line and exit 1: an error thrown at the top level would end the process with "Fatal
// error: Error raised at top level", a backtrace and a trap.
do {
    try await run()
} catch {
    FileHandle.standardError.write(Data("traced-worker: \(error)\n".utf8))
    exit(1)
}
