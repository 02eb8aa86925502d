import Foundation
import Logging
import OTel
import ServiceLifecycle
import Sky
import SkyWorkloads
import Tracing

// The client's spans and the worker's join one trace per call in the collector; the broker's
// span (queue wait and dispatch) joins them too when the broker records spans.
func run() async throws {
    var otel = OTel.Configuration.default
    otel.serviceName = "sky-client"
    let observability = try OTel.bootstrap(configuration: otel)

    let logger = Logger(label: "traced-client")
    let exporter = Task { try await observability.run() }
    defer { exporter.cancel() }
    let sky = try await SkyClient(broker: CommandLine.arguments.dropFirst().first ?? "tcp://127.0.0.1:5555")
    do {
        try await withSpan("scan ten sectors") { _ in
            for sector in 0..<10 {
                let result = try await sky.scan(ScanTask(sector: sector, size: 128))
                logger.info("scanned", metadata: ["sector": "\(sector)", "blobs": "\(result.blobs.count)"])
            }
        }
    } catch {
        await sky.close()
        throw error
    }
    await sky.close()
}

// One line and exit 1: an error thrown at the top level would end the process with "Fatal
// error: Error raised at top level", a backtrace and a trap.
do {
    try await run()
} catch {
    FileHandle.standardError.write(Data("traced-client: \(error)\n".utf8))
    exit(1)
}
