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

    @Option(help: "Seconds to wait for each scan before counting it as failed.")
    var timeout: Double = 60

    @Flag(help: "Check every result against a scan computed locally.")
    var verify = false

    @Flag(help: "Print the summary as one JSON object.")
    var json = false

    @OptionGroup var common: CommonOptions

    func validate() throws {
        guard sectors >= 0 else { throw ValidationError("--sectors must be 0 or more") }
        guard concurrency >= 1 else { throw ValidationError("--concurrency must be at least 1") }
        guard ScanTask.sizeRange.contains(size) else {
            throw ValidationError("--size must be in \(ScanTask.sizeRange)")
        }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
    }

    func run() async throws {
        _ = ProcessSetup.prepare(label: "skyscan", options: common)
        let client = try await SkyClient(broker: broker)
        let summary = await scanAll(with: client)
        await client.close()
        ProcessSetup.line(json ? summary.json() : summary.table())
        if !summary.succeeded { throw ExitCode(1) }
    }

    private enum Outcome: Sendable {
        case report(SectorReport, latency: Duration)
        case failure(String)
    }

    private func scanAll(with client: SkyClient) async -> ScanSummary {
        var progress = ProgressLine(total: sectors, enabled: !json)
        var latencies: [Double] = []
        latencies.reserveCapacity(sectors)
        var summary = ScanSummary(
            sectors: sectors, completed: 0, failed: 0, mismatches: 0, verified: verify, blobs: 0, elapsedSeconds: 0,
            tasksPerSecond: 0, p50Milliseconds: 0, p99Milliseconds: 0, errors: [:])
        let start = ContinuousClock.now
        await withTaskGroup(of: (Int, Outcome).self) { group in
            var next = first
            let end = first + sectors
            func launch(_ sector: Int) {
                let task = ScanTask(sector: sector, size: size)
                let limit = Duration.milliseconds(Int64(timeout * 1000))
                group.addTask {
                    let begin = ContinuousClock.now
                    do {
                        let report = try await Self.scan(task, on: client, timeout: limit)
                        return (sector, .report(report, latency: ContinuousClock.now - begin))
                    } catch {
                        return (sector, .failure(String(describing: error)))
                    }
                }
            }
            while next < end && next - first < concurrency {
                launch(next)
                next += 1
            }
            for await (sector, outcome) in group {
                switch outcome {
                case .report(let report, let latency):
                    summary.completed += 1
                    summary.blobs += report.blobs.count
                    latencies.append(latency.inSeconds * 1000)
                    if verify, (try? SectorScanner.scan(ScanTask(sector: sector, size: size))) != report {
                        summary.mismatches += 1
                        summary.errors["sector \(sector): result differs from the local scan", default: 0] += 1
                    }
                case .failure(let description):
                    summary.failed += 1
                    summary.errors[description, default: 0] += 1
                }
                progress.update(done: summary.completed + summary.failed, failed: summary.failed)
                if next < end {
                    launch(next)
                    next += 1
                }
            }
        }
        progress.finish()
        let elapsed = ContinuousClock.now - start
        summary.elapsedSeconds = elapsed.inSeconds
        summary.tasksPerSecond = summary.elapsedSeconds > 0 ? Double(summary.completed) / summary.elapsedSeconds : 0
        latencies.sort()
        summary.p50Milliseconds = ScanSummary.percentile(latencies, 0.50)
        summary.p99Milliseconds = ScanSummary.percentile(latencies, 0.99)
        return summary
    }

    /// One scan with a deadline: whichever finishes first, the scan or the timer, wins; the other
    /// is cancelled (which abandons the call in the client).
    private static func scan(_ task: ScanTask, on client: SkyClient, timeout: Duration) async throws -> SectorReport {
        try await withThrowingTaskGroup(of: SectorReport.self) { group in
            group.addTask { try await client.scan(task) }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw SkyError.timeout("no result for sector \(task.sector) within \(timeout)")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}
