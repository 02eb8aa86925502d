import ArgumentParser
import Foundation
import Histogram
import Logging
import Sky
import SkyCLISupport
import SkyWire
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

    @Option(
        help: ArgumentHelp(
            "The broker's clients endpoint; for an active broker and its standbys, each one's, separated by commas.",
            valueName: "endpoint[,endpoint…]"))
    var broker = "tcp://127.0.0.1:5555"

    @Option(parsing: .unconditional, help: "How many sectors to scan.")
    var sectors = 1000

    @Option(parsing: .unconditional, help: "First sector number.")
    var first = 0

    @Option(parsing: .unconditional, help: "Scans in flight at once.")
    var concurrency = 64

    @Option(help: "Image side in pixels (CPU per scan grows with its square).")
    var size = ScanTask.defaultSize

    @Option(parsing: .unconditional, help: "Seconds each attempt of a scan may take.")
    var timeout: Double = 60

    @Option(
        parsing: .unconditional,
        help:
            "Attempts per scan (1 = no retry); timeouts and an unreachable broker are retried (the broker itself hands a lost worker's scan to another)."
    )
    var attempts = 3

    @Flag(help: "Check every result against a scan computed locally.")
    var verify = false

    @Flag(help: "Print the summary as one JSON object.")
    var json = false

    @OptionGroup var metricsOptions: MetricsOptions

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        try FlagCheck.endpointList(broker, "--broker")
        try FlagCheck.integer(sectors, "--sectors", in: 0...Self.maxSector)
        try FlagCheck.integer(first, "--first", in: 0...(Self.maxSector - sectors))
        try FlagCheck.integer(concurrency, "--concurrency", in: 1...100_000)
        try FlagCheck.integer(size, "--size", in: ScanTask.sizeRange.lowerBound...ScanTask.sizeRange.upperBound)
        try FlagCheck.seconds(timeout, "--timeout", in: 0.001...86_400)
        try FlagCheck.integer(attempts, "--attempts", in: 1...100)
    }

    /// The highest sector number `--first` + `--sectors` may reach.
    static let maxSector = 1 << 50

    /// Distinct error messages the summary lists; more are counted under one line.
    static let maxErrorKinds = 20

    func run() async throws {
        _ = ProcessSetup.prepare(label: "skyscan", options: common)
        // The client's metrics while it scans (standard output keeps the summary alone).
        if let url = await metricsOptions.start(program: "skyscan") {
            ProcessSetup.standardError("skyscan: metrics at \(url)\n")
        }
        var configuration = SkyClient.Configuration()
        configuration.credentials = curve.credentials(program: "skyscan")
        let client: SkyClient
        do {
            client = try await SkyClient(brokers: FlagCheck.endpoints(broker), configuration: configuration)
        } catch {
            ProcessSetup.fail("skyscan", "\(error)")
        }
        let summary = await scanAll(with: client)
        await client.close()
        ProcessSetup.line(json ? summary.json() : summary.table())
        if !summary.succeeded { throw ExitCode(1) }
    }

    private func scanAll(with client: SkyClient) async -> ScanSummary {
        var progressLine = ProgressLine(total: sectors, enabled: !json)
        // Latencies in microseconds, in a histogram: memory stays the same for any --sectors.
        var latencies = Histogram<UInt64>(highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: .three)
        var summary = ScanSummary(
            sectors: sectors, completed: 0, failed: 0, retried: 0, mismatches: 0, verified: verify, blobs: 0,
            elapsedSeconds: 0, tasksPerSecond: 0, p50Milliseconds: 0, p99Milliseconds: 0, errors: [:])
        // Made as they are started, not all at once.
        let tasks = SectorTasks(sectors: first..<first + sectors, size: size)
        // --timeout and --attempts bound a sector's call: no deadline beside them.
        let options = ScanOptions(
            timeout: .milliseconds(Int64(timeout * 1000)), deadline: nil, retry: RetryPolicy(maxAttempts: attempts))
        var last = BatchProgress(total: sectors)
        for await done in client.scanAll(tasks, concurrency: concurrency, options: options) {
            switch done.result {
            case .success(let report):
                summary.blobs += report.blobs.count
                latencies.record(UInt64(max(0, done.latency.inSeconds * 1_000_000)))
                if verify, (try? SectorScanner.scan(done.task)) != report {
                    summary.mismatches += 1
                    Self.count("sector \(done.task.sector): result differs from the local scan", in: &summary)
                }
            case .failure(let error):
                Self.count(String(describing: error), in: &summary)
            }
            last = done.progress
            progressLine.update(last)
        }
        progressLine.finish()
        summary.completed = last.completed
        summary.failed = last.failed
        summary.retried = last.retried
        summary.elapsedSeconds = last.elapsed.inSeconds
        // Tasks done, not answers: failures are no throughput (2,067 tasks/s with none done).
        summary.tasksPerSecond = summary.elapsedSeconds > 0 ? Double(last.completed) / summary.elapsedSeconds : 0
        if latencies.totalCount > 0 {
            summary.p50Milliseconds = Double(latencies.valueAtPercentile(50)) / 1000
            summary.p99Milliseconds = Double(latencies.valueAtPercentile(99)) / 1000
        }
        return summary
    }

    /// Counts an error message, keeping at most ``maxErrorKinds`` distinct ones. Messages that
    /// differ only in a measured time ("for 15.344 s") are one kind: each had a line of its own.
    static func count(_ said: String, in summary: inout ScanSummary) {
        let message = said.replacing(/\d+\.\d+/, with: "…")
        let key =
            summary.errors[message] != nil || summary.errors.count < Self.maxErrorKinds
            ? message : "other errors (only the first \(Self.maxErrorKinds) kinds are listed)"
        summary.errors[key, default: 0] += 1
    }
}

/// The scan tasks of a range of sectors, made one by one as the batch starts them.
struct SectorTasks: Sequence, Sendable {
    let sectors: Range<Int>
    let size: Int

    var underestimatedCount: Int { sectors.count }

    func makeIterator() -> some IteratorProtocol<ScanTask> {
        var remaining = sectors.makeIterator()
        return AnyIterator { remaining.next().map { ScanTask(sector: $0, size: size) } }
    }
}
