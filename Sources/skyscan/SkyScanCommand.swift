import ArgumentParser
import Foundation
import Logging
import Sky
import SkyCLISupport
import SkyWorkloads

@main
struct SkyScanCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skyscan",
        abstract: "Scans sectors across a Sky cluster and reports throughput and latency.",
        discussion: """
            Runs sky.scan for sectors --first ..< --first + --sectors with --concurrency scans in
            flight. Shows a progress line on a terminal, then a summary (--json: one JSON object).
            Exits 0 only if every scan succeeded (and, with --verify, matched a local scan).
            """)

    @Option(help: "The broker's clients endpoint.")
    var broker = "tcp://127.0.0.1:5555"

    @Option(help: "How many sectors to scan.")
    var sectors = 1000

    @Option(help: "First sector number.")
    var first = 0

    @Option(help: "Scans in flight at once.")
    var concurrency = 64

    @Option(help: "Image side in pixels (CPU per scan grows with its square).")
    var size = ScanTask.defaultSize

    @Option(help: "Seconds each attempt of a scan may take.")
    var timeout: Double = 60

    @Option(help: "Attempts per scan (1 = no retry); timeouts and lost workers are retried.")
    var attempts = 3

    @Flag(help: "Check every result against a scan computed locally.")
    var verify = false

    @Flag(help: "Print the summary as one JSON object.")
    var json = false

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        guard sectors >= 0 else { throw ValidationError("--sectors must be 0 or more") }
        guard concurrency >= 1 else { throw ValidationError("--concurrency must be at least 1") }
        guard ScanTask.sizeRange.contains(size) else {
            throw ValidationError("--size must be in \(ScanTask.sizeRange)")
        }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        guard attempts >= 1 else { throw ValidationError("--attempts must be at least 1") }
    }

    func run() async throws {
        _ = ProcessSetup.prepare(label: "skyscan", options: common)
        var configuration = SkyClient.Configuration()
        configuration.credentials = curve.credentials(program: "skyscan")
        let client = try await SkyClient(broker: broker, configuration: configuration)
        let summary = await scanAll(with: client)
        await client.close()
        ProcessSetup.line(json ? summary.json() : summary.table())
        if !summary.succeeded { throw ExitCode(1) }
    }

    private func scanAll(with client: SkyClient) async -> ScanSummary {
        var progressLine = ProgressLine(total: sectors, enabled: !json)
        var latencies: [Double] = []
        latencies.reserveCapacity(sectors)
        var summary = ScanSummary(
            sectors: sectors, completed: 0, failed: 0, retried: 0, mismatches: 0, verified: verify, blobs: 0,
            elapsedSeconds: 0, tasksPerSecond: 0, p50Milliseconds: 0, p99Milliseconds: 0, errors: [:])
        let tasks = (first..<first + sectors).map { ScanTask(sector: $0, size: size) }
        let options = ScanOptions(
            timeout: .milliseconds(Int64(timeout * 1000)), retry: RetryPolicy(maxAttempts: attempts))
        var last = BatchProgress(total: sectors)
        for await done in client.scanAll(tasks, concurrency: concurrency, options: options) {
            switch done.result {
            case .success(let report):
                summary.blobs += report.blobs.count
                latencies.append(done.latency.inSeconds * 1000)
                if verify, (try? SectorScanner.scan(done.task)) != report {
                    summary.mismatches += 1
                    summary.errors["sector \(done.task.sector): result differs from the local scan", default: 0] += 1
                }
            case .failure(let error):
                summary.errors[String(describing: error), default: 0] += 1
            }
            last = done.progress
            progressLine.update(last)
        }
        progressLine.finish()
        summary.completed = last.completed
        summary.failed = last.failed
        summary.retried = last.retried
        summary.elapsedSeconds = last.elapsed.inSeconds
        summary.tasksPerSecond = last.tasksPerSecond
        latencies.sort()
        summary.p50Milliseconds = ScanSummary.percentile(latencies, 0.50)
        summary.p99Milliseconds = ScanSummary.percentile(latencies, 0.99)
        return summary
    }
}
