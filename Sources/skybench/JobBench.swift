import Foundation
import Histogram
import Sky
import SkyCLISupport
import SkyProtocol
import SkyTestSupport
import SkyWire
import SkyWorkloads
import UnixSignals

/// Durable jobs (`skybench --jobs`): how long a submit takes to be on disk, how many jobs per
/// second go from submit to recorded result, what a durable load costs `scan` beside it, and
/// how many journal bytes a job takes. One broker with a journal in a temporary directory,
/// sky.echo workers, 64-byte tasks and results.
///
/// With the baseline's programs it also measures the floor under "scan beside a durable load"
/// in the same round: the C chain's throughput and latency alone, and beside the least a
/// durable job can cost in plain C (`client.c`'s paced mode: one fsync'd record and one round
/// trip through the chain per job, at the same rate). No system can lose less to that load
/// than the one that does nothing else.
struct JobBench {
    var workers: Int
    var capacity: Int
    var transport: Transport
    var baseline: BaselinePrograms?
    var submitLatencyRequests = 1000
    var resultLatencyJobs = 300
    var jobs = 20_000
    var inFlight = 256
    var rounds = 3
    /// A PostgreSQL store for the broker (`--store`); a SQLite file in a temporary directory
    /// without one.
    var store: String?
    /// Requests of each latency phase (a tenth of them first, as warm-up).
    var latencyRequests = 2000
    /// How long each throughput phase measures (after half a second of warm-up).
    var measure = Duration.seconds(2)
    /// Schedules of the schedules phase, and how long it measures each part.
    var scheduleCount = 1000
    var scheduleMeasure = Duration.seconds(5)
    /// Chains of each length in the flows phase (after 5 of warm-up).
    var flowChains = 50
    /// Steps of the flows phase's large group (the most a flow has).
    var flowGroupSize = FlowSpec.maxSteps

    /// Every fixed phase at a tenth, or a quarter of its time: figures too few to mean much,
    /// for a run that checks the mode works end to end (the test suite's smoke test).
    mutating func shrinkForSmoke() {
        submitLatencyRequests /= 10
        resultLatencyJobs /= 10
        latencyRequests /= 10
        measure = measure / 4
        scheduleCount /= 10
        scheduleMeasure = scheduleMeasure / 5
        flowChains /= 10
        flowGroupSize /= 10
    }

    struct Results: Codable {
        var submitP50Microseconds: [Double] = []
        var submitP99Microseconds: [Double] = []
        /// From submit to the result in hand (`job.value`), one job at a time on idle workers.
        var resultP50Microseconds: [Double] = []
        var durableJobsPerSecond: [Double] = []
        var scanAlone: [Double] = []
        var scanP50Alone: [Double] = []
        /// Beside a paced durable load (``pacedJobsPerSecond``).
        var scanBesidePaced: [Double] = []
        var scanP50BesidePaced: [Double] = []
        var pacedJobsRecorded: [Double] = []
        /// Beside the same paced load submitted by another process (`skybench --paced-jobs`), as
        /// most deployments submit jobs (a web server) apart from where they scan.
        var scanBesideOtherProcess: [Double] = []
        var scanP50BesideOtherProcess: [Double] = []
        var otherProcessJobsRecorded: [Double] = []
        /// Beside as many submits as 64 in flight make.
        var scanBesideJobs: [Double] = []
        var scanP50BesideJobs: [Double] = []
        var jobsPerSecondBesideScan: [Double] = []
        var journalBytesPerJob: [Double] = []
        /// The floor: the C baseline alone and beside the C paced load (empty without it).
        var baselineAlone: [Double] = []
        var baselineP50Alone: [Double] = []
        var baselineBesidePaced: [Double] = []
        var baselineP50BesidePaced: [Double] = []
        var baselinePacedJobs: [Double] = []
        /// CPU the C paced load's own process spent per job, in microseconds.
        var baselinePacedCPUPerJob: [Double] = []
        /// The schedules phase (``measureSchedules(_:into:)``): the broker's CPU, in percent of
        /// one core, with nothing due, with ``scheduleCount`` schedules of an hour, with as
        /// many of a second (and the jobs they made per second), and with the same rate of jobs
        /// submitted by a client instead.
        var schedules = 0
        var brokerCPUIdle: [Double] = []
        var brokerCPUSchedulesNotDue: [Double] = []
        var brokerCPUSchedulesFiring: [Double] = []
        var scheduledJobsPerSecond: [Double] = []
        var brokerCPUPacedSubmits: [Double] = []
        var pacedSubmitsPerSecond: [Double] = []
        /// The flows phase (``measureFlows(_:into:)``): a chain of two steps, submit to result,
        /// and what each step of a longer chain adds (medians of a round).
        var chainOfTwoMicroseconds: [Double] = []
        var chainStepMicroseconds: [Double] = []
        /// The broker's CPU per step of a group of 100, and of ``flowGroupSize`` (with the
        /// whole flow's time, submit to result).
        var groupSize = 0
        var smallGroupBrokerMicrosecondsPerStep: [Double] = []
        var largeGroupBrokerMicrosecondsPerStep: [Double] = []
        var largeGroupSeconds: [Double] = []
    }

    /// Bytes the C paced load writes and fsyncs per job: the issue's budget of journal bytes per job.
    static let pacedRecordBytes = 1024

    static let task = EchoTask(message: String(repeating: "j", count: 64))

    func run() async throws -> Results {
        var results = Results()
        for round in 1...rounds {
            print("round \(round) of \(rounds)...")
            // The floor alternates with Sky's phases: first in odd rounds, last in even ones.
            let floorFirst = round % 2 == 1
            if floorFirst, let baseline { try await measureFloor(baseline, into: &results) }
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "skybench-jobs-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: directory) }
            let target = try await SkyTarget.start(
                workers: workers, capacity: capacity, transport: transport,
                brokerArguments: store.map { ["--store", $0] } ?? ["--state-dir", directory.path])
            do {
                let sky = target.client
                // Submit latency, one in flight: the broker answers once the job is fsync'd.
                var histogram = Histogram<UInt64>(
                    highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
                for index in 0..<(submitLatencyRequests + 100) {
                    let sent = ContinuousClock.now
                    _ = try await sky.submit(Self.task, options: Self.options)
                    if index >= 100 { histogram.record(UInt64(max(1, (ContinuousClock.now - sent).inSeconds * 1e6))) }
                }
                results.submitP50Microseconds.append(Double(histogram.valueAtPercentile(50)))
                results.submitP99Microseconds.append(Double(histogram.valueAtPercentile(99)))
                progress("submit latency measured; waiting for those jobs to finish")
                try await waitForSucceeded(submitLatencyRequests + 100, sky)

                // A job's whole life, one at a time: submit, run, result recorded and read.
                progress("one job at a time, from submit to its result")
                histogram.reset()
                for index in 0..<(resultLatencyJobs + 30) {
                    let sent = ContinuousClock.now
                    _ = try await sky.submit(Self.task, options: Self.options).value
                    if index >= 30 { histogram.record(UInt64(max(1, (ContinuousClock.now - sent).inSeconds * 1e6))) }
                }
                results.resultP50Microseconds.append(Double(histogram.valueAtPercentile(50)))

                // End to end: `jobs` submitted with `inFlight` submits outstanding, until every
                // result is recorded.
                let before = try await succeeded(sky)
                progress("end to end: \(jobs) jobs")
                let started = ContinuousClock.now
                let last = try await submit(jobs, sky)
                let allSubmitted = ContinuousClock.now - started
                let doneThen = try await succeeded(sky) - before
                progress("all submitted after \(allSubmitted), \(doneThen) done by then")
                // The last job acknowledged is about the last to run (one priority: first in,
                // first out), and the broker answers its wait when it ends; the count then tells
                // whether any other is still running, in short steps.
                _ = try await last?.value
                let lastRead = ContinuousClock.now - started
                try await waitForSucceeded(before + jobs, sky, every: .milliseconds(5))
                let elapsed = ContinuousClock.now - started
                progress("the last job's result read after \(lastRead), every result recorded after \(elapsed)")
                results.durableJobsPerSecond.append(Double(jobs) / elapsed.inSeconds)
                if store == nil {  // a server's bytes are not in the directory
                    let bytes = journalBytes(directory)
                    results.journalBytesPerJob.append(Double(bytes) / Double(try await succeeded(sky)))
                }

                // scan alone, then beside a durable load of 64 submits in flight.
                progress("scan alone")
                results.scanAlone.append(try await scanRate(target))
                results.scanP50Alone.append(try await scanLatency(target))
                progress("scan beside \(Self.pacedJobsPerSecond) jobs/s")
                let paced = Task {
                    let load = ContinuousClock.now
                    let submitted = try await Self.submitPacedUntilCancelled(sky)
                    return Double(submitted) / (ContinuousClock.now - load).inSeconds
                }
                try await Task.sleep(for: .milliseconds(500))
                results.scanBesidePaced.append(try await scanRate(target))
                results.scanP50BesidePaced.append(try await scanLatency(target))
                paced.cancel()
                results.pacedJobsRecorded.append(try await paced.value)
                try await waitForSucceeded(try await submittedCount(sky), sky)
                progress("scan beside \(Self.pacedJobsPerSecond) jobs/s from another process")
                let other = try await startPacedProcess(target.clientsEndpoint)
                do {
                    try await Task.sleep(for: .milliseconds(500))
                    results.scanBesideOtherProcess.append(try await scanRate(target))
                    results.scanP50BesideOtherProcess.append(try await scanLatency(target))
                    results.otherProcessJobsRecorded.append(try await stopPacedProcess(other))
                } catch {
                    other.killNow()
                    throw error
                }
                try await waitForSucceeded(try await submittedCount(sky), sky)
                progress("scan beside 64 submits in flight")
                let load = Task {
                    let load = ContinuousClock.now
                    let submitted = try await submitUntilCancelled(sky)
                    return Double(submitted) / (ContinuousClock.now - load).inSeconds
                }
                try await Task.sleep(for: .milliseconds(500))
                results.scanBesideJobs.append(try await scanRate(target))
                results.scanP50BesideJobs.append(try await scanLatency(target))
                load.cancel()
                results.jobsPerSecondBesideScan.append(try await load.value)
                try await waitForSucceeded(try await submittedCount(sky), sky)
                try await measureSchedules(target, into: &results)
                try await measureFlows(target, into: &results)
            } catch {
                if let snapshot = try? await target.snapshot() {
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.sortedKeys]
                    progress(
                        "the broker when the run failed: \(String(decoding: try encoder.encode(snapshot), as: UTF8.self))"
                    )
                }
                await target.stop()
                throw error
            }
            await target.stop()
            if !floorFirst, let baseline { try await measureFloor(baseline, into: &results) }
        }
        return results
    }

    /// The C chain's scan figures alone and beside the C paced load (see the type's comment).
    private func measureFloor(_ programs: BaselinePrograms, into results: inout Results) async throws {
        progress("the floor: plain libzmq alone, then beside \(Self.pacedJobsPerSecond) fsync'd C jobs/s")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "skybench-floor-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = try await BaselineTarget.start(
            programs: programs, workers: workers, credits: capacity, transport: transport)
        do {
            results.baselineAlone.append(try await floorRate(target))
            results.baselineP50Alone.append(
                try await target.latency(payload: 64, requests: latencyRequests, warmup: latencyRequests / 10).p50 ?? 0)
            let load = try target.startPaced(
                payload: 64, perSecond: Self.pacedJobsPerSecond,
                file: directory.appendingPathComponent("paced.journal"), recordBytes: Self.pacedRecordBytes)
            do {
                try await Task.sleep(for: .milliseconds(500))
                results.baselineBesidePaced.append(try await floorRate(target))
                results.baselineP50BesidePaced.append(
                    try await target.latency(payload: 64, requests: latencyRequests, warmup: latencyRequests / 10).p50
                        ?? 0)
                let figures = try await target.stopPaced(load)
                results.baselinePacedJobs.append(figures.rate)
                results.baselinePacedCPUPerJob.append(figures.cpuPerTask)
            } catch {
                load.killNow()
                throw error
            }
        } catch {
            await target.stop()
            throw error
        }
        await target.stop()
    }

    private func floorRate(_ target: BaselineTarget) async throws -> Double {
        try await target.throughput(payload: 64, inFlight: inFlight, warmup: .milliseconds(500), measure: measure)
            .rate
    }

    func progress(_ text: String) {
        ProcessSetup.standardError("  \(text)\n")
    }

    /// Jobs of the bench: no retries to hide failures, the default retention.
    static let options = JobOptions(retry: .never)

    /// Submits `count` jobs with `inFlight` submits outstanding; returns the job acknowledged last.
    private func submit(_ count: Int, _ sky: SkyClient) async throws -> Job<EchoTask>? {
        try await withThrowingTaskGroup(of: Job<EchoTask>.self) { group in
            var next = 0
            var last: Job<EchoTask>?
            for _ in 0..<min(inFlight, count) {
                next += 1
                group.addTask { try await sky.submit(Self.task, options: Self.options) }
            }
            while let job = try await group.next() {
                last = job
                if next < count {
                    next += 1
                    group.addTask { try await sky.submit(Self.task, options: Self.options) }
                }
            }
            return last
        }
    }

    /// The durable load beside which `scan` should run as fast as alone: twice what Celery with
    /// Redis does on this machine in all (peers.md).
    static let pacedJobsPerSecond = 1000

    /// The other-process load (`skybench --paced-jobs BROKER`): says "submitting" once
    /// connected, submits ``pacedJobsPerSecond`` jobs a second until SIGTERM or SIGINT, then
    /// prints one JSON line, `{"jobs": recorded, "seconds": elapsed}`.
    static func pacedLoad(broker: String) async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let sky = try await SkyClient(broker: broker)
        _ = try await sky.clusterSnapshot()
        let started = ContinuousClock.now
        ProcessSetup.standardOutput("submitting\n")
        let jobs = try await withThrowingTaskGroup(of: Int?.self) { group in
            group.addTask { try await submitPacedUntilCancelled(sky) }
            group.addTask {
                for await _ in signals { break }
                return nil
            }
            var jobs = 0
            while let next = try await group.next() {
                if let next {
                    jobs = next
                } else {
                    group.cancelAll()
                }
            }
            return jobs
        }
        let seconds = (ContinuousClock.now - started).inSeconds
        ProcessSetup.standardOutput("{\"jobs\": \(jobs), \"seconds\": \(seconds)}\n")
        await sky.close()
    }

    private func startPacedProcess(_ broker: String) async throws -> SkyProcess {
        let process = try SkyProcess("skybench", ["--paced-jobs", broker], name: "skybench-paced-jobs")
        do {
            try await process.waitForLine(timeout: .seconds(30)) { $0 == "submitting" }
        } catch {
            process.killNow()
            throw BenchError("the paced job load did not start: \(process.errorText)")
        }
        return process
    }

    /// Stops the other process's load; returns its jobs recorded per second.
    private func stopPacedProcess(_ process: SkyProcess) async throws -> Double {
        struct Report: Decodable {
            var jobs: Int
            var seconds: Double
        }
        process.signal(SIGTERM)
        let status = try await process.waitForExit(timeout: .seconds(30))
        guard status == 0, let line = process.outputLines.last,
            let report = try? JSONDecoder().decode(Report.self, from: Data(line.utf8)), report.seconds > 0
        else { throw BenchError("the paced job load failed (status \(status)): \(process.errorText)") }
        return Double(report.jobs) / report.seconds
    }

    /// Submits ``pacedJobsPerSecond`` jobs a second (16 submitters, each on its own schedule)
    /// until cancelled; returns how many were recorded.
    static func submitPacedUntilCancelled(_ sky: SkyClient) async throws -> Int {
        let submitters = 16
        let interval = Duration.seconds(Double(submitters) / Double(Self.pacedJobsPerSecond))
        return try await withThrowingTaskGroup(of: Int.self) { group in
            for offset in 0..<submitters {
                group.addTask {
                    var done = 0
                    var next = ContinuousClock.now + interval * (Double(offset) / Double(submitters))
                    while !Task.isCancelled {
                        do {
                            try await Task.sleep(until: next, clock: .continuous)
                            _ = try await sky.submit(Self.task, options: Self.options)
                            done += 1
                            next = next + interval
                        } catch is CancellationError {
                            break
                        }
                    }
                    return done
                }
            }
            return try await group.reduce(0, +)
        }
    }

    /// Submits with 64 in flight until cancelled; returns how many were recorded.
    private func submitUntilCancelled(_ sky: SkyClient) async throws -> Int {
        try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<64 {
                group.addTask {
                    var done = 0
                    while !Task.isCancelled {
                        do {
                            _ = try await sky.submit(Self.task, options: Self.options)
                            done += 1
                        } catch is CancellationError {
                            break
                        }
                    }
                    return done
                }
            }
            return try await group.reduce(0, +)
        }
    }

    private func scanRate(_ target: SkyTarget) async throws -> Double {
        let figures = try await target.typedThroughput(
            payload: 64, inFlight: inFlight, warmup: .milliseconds(500), measure: measure)
        return Double(figures.tasks) / figures.seconds
    }

    private func scanLatency(_ target: SkyTarget) async throws -> Double {
        try await target.latency(payload: 64, requests: latencyRequests, warmup: latencyRequests / 10).p50 ?? 0
    }

    func submittedCount(_ sky: SkyClient) async throws -> Int {
        Int(try await sky.clusterSnapshot().jobs?.submitted ?? 0)
    }

    private func succeeded(_ sky: SkyClient) async throws -> Int {
        Int(try await sky.clusterSnapshot().jobs?.succeeded ?? 0)
    }

    /// Polls the broker's count. Not often while jobs run: each snapshot measures the broker's
    /// heap (mallinfo), which costs it more the more jobs it holds, and would be counted
    /// against the jobs; a timed phase waits for its last job first and then polls in short
    /// steps, since a poll's step is added to the time measured.
    func waitForSucceeded(
        _ count: Int, _ sky: SkyClient, every step: Duration = .milliseconds(100)
    ) async throws {
        let deadline = ContinuousClock.now + .seconds(300)
        while try await succeeded(sky) < count {
            guard ContinuousClock.now < deadline else { throw BenchError("jobs did not all succeed within 300 s") }
            try await Task.sleep(for: step)
        }
    }

    /// The journal's file and its write-ahead log.
    private func journalBytes(_ directory: URL) -> Int {
        ["jobs.sqlite", "jobs.sqlite-wal"].reduce(0) { total, name in
            let path = directory.appendingPathComponent(name).path
            return total + ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0)
        }
    }

    static func table(_ results: Results) -> String {
        let paced = "\(pacedJobsPerSecond) jobs/s"
        var lines = [
            "Durable jobs (sky.echo, 64-byte task and result); median of rounds (each round):",
            line("submit acknowledged (fsync'd), p50, 1 in flight", results.submitP50Microseconds, "µs"),
            line("submit acknowledged, p99, 1 in flight", results.submitP99Microseconds, "µs"),
            line("job submit → its result read, p50, 1 in flight", results.resultP50Microseconds, "µs"),
            line("jobs submit → result recorded, 256 in flight", results.durableJobsPerSecond, "jobs/s"),
            line("journal bytes per job", results.journalBytesPerJob, "B"),
            line("scan throughput alone, 256 in flight", results.scanAlone, "tasks/s"),
            line("scan p50 alone, 1 in flight", results.scanP50Alone, "µs"),
        ]
        let besides = [
            ("beside \(paced)", results.scanBesidePaced, results.scanP50BesidePaced, results.pacedJobsRecorded),
            (
                "beside \(paced) from another process", results.scanBesideOtherProcess,
                results.scanP50BesideOtherProcess, results.otherProcessJobsRecorded
            ),
            (
                "beside 64 submits in flight", results.scanBesideJobs, results.scanP50BesideJobs,
                results.jobsPerSecondBesideScan
            ),
        ]
        for (name, throughput, p50, jobs) in besides {
            lines += [
                line("scan throughput \(name)", throughput, "tasks/s"), line("scan p50 \(name)", p50, "µs"),
                line("  (the jobs recorded meanwhile)", jobs, "jobs/s"),
            ]
        }
        for (name, throughput, p50, _) in besides {
            lines.append(ratios(name, throughput, results.scanAlone, p50, results.scanP50Alone))
        }
        if !results.brokerCPUSchedulesFiring.isEmpty {
            func perJob(_ cpu: [Double], _ rates: [Double]) -> [Double] {
                zip(cpu, rates).map { $1 > 0 ? $0 * 10_000 / $1 : 0 }
            }
            let count = results.schedules
            lines += [
                "",
                "Schedules: the broker's CPU, in % of one core, with \(count) schedules (its workers run what fires)",
                line("nothing due", results.brokerCPUIdle, "%"),
                line("\(count) of an hour (each looked at every tick)", results.brokerCPUSchedulesNotDue, "%"),
                line("\(count) of a second, firing", results.brokerCPUSchedulesFiring, "%"),
                line("  (the jobs they made)", results.scheduledJobsPerSecond, "jobs/s"),
                line(
                    "  (broker CPU per scheduled job)",
                    perJob(results.brokerCPUSchedulesFiring, results.scheduledJobsPerSecond), "µs"),
                line("jobs submitted by a client instead", results.brokerCPUPacedSubmits, "%"),
                line("  (the jobs submitted)", results.pacedSubmitsPerSecond, "jobs/s"),
                line(
                    "  (broker CPU per submitted job)",
                    perJob(results.brokerCPUPacedSubmits, results.pacedSubmitsPerSecond), "µs"),
            ]
        }
        if !results.chainStepMicroseconds.isEmpty {
            lines += [
                "",
                "Flows: chains of sky.echo steps, one at a time",
                line("a chain of 2, submit → result", results.chainOfTwoMicroseconds, "µs"),
                line("each further step, end → next start", results.chainStepMicroseconds, "µs"),
                line("broker CPU per step, a group of 100", results.smallGroupBrokerMicrosecondsPerStep, "µs"),
                line(
                    "broker CPU per step, a group of \(results.groupSize)", results.largeGroupBrokerMicrosecondsPerStep,
                    "µs"),
                line("  (the group's submit → result)", results.largeGroupSeconds, "s"),
            ]
        }
        if !results.baselineAlone.isEmpty {
            lines += [
                "",
                "The floor: plain libzmq (bench/baseline) alone, and beside \(pacedJobsPerSecond) C jobs/s (each one fsync'd",
                "\(pacedRecordBytes)-byte record and one round trip through the chain: client.c's paced mode)",
                line("C throughput alone, 256 in flight", results.baselineAlone, "tasks/s"),
                line("C p50 alone, 1 in flight", results.baselineP50Alone, "µs"),
                line("C throughput beside \(pacedJobsPerSecond) C jobs/s", results.baselineBesidePaced, "tasks/s"),
                line("C p50 beside \(pacedJobsPerSecond) C jobs/s", results.baselineP50BesidePaced, "µs"),
                line("  (the C jobs answered meanwhile)", results.baselinePacedJobs, "jobs/s"),
                line("  (the C paced process's own CPU per job)", results.baselinePacedCPUPerJob, "µs"),
                ratios(
                    "floor, C beside \(pacedJobsPerSecond) C jobs/s", results.baselineBesidePaced,
                    results.baselineAlone,
                    results.baselineP50BesidePaced, results.baselineP50Alone),
            ]
        }
        return lines.joined(separator: "\n")
    }

    /// Both stores measured in one run (`--jobs --store`): SQLite's and PostgreSQL's tables, then
    /// the two figures the PostgreSQL store is held to, side by side.
    struct StorePair: Codable {
        var sqlite: Results
        var postgresql: Results

        var table: String {
            let rows = [
                (
                    "jobs submit → result recorded, 256 in flight", sqlite.durableJobsPerSecond,
                    postgresql.durableJobsPerSecond, "jobs/s"
                ),
                (
                    "submit acknowledged, p50, 1 in flight", sqlite.submitP50Microseconds,
                    postgresql.submitP50Microseconds, "µs"
                ),
            ]
            var lines = [
                "SQLite (a file in a temporary directory):", JobBench.table(sqlite), "",
                "PostgreSQL (--store):", JobBench.table(postgresql), "",
                "The two stores in this run (medians):",
            ]
            for (name, first, second, unit) in rows {
                let (a, b) = (JobBench.median(first), JobBench.median(second))
                lines.append(
                    "\(name.padding(toLength: 48, withPad: " ", startingAt: 0)) SQLite \(String(format: "%.0f", a)) \(unit), PostgreSQL \(String(format: "%.0f", b)) \(unit) (\(String(format: "%.2f", a > 0 ? b / a : 0))×)"
                )
            }
            return lines.joined(separator: "\n")
        }
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }

    /// A measure's median and every round's value.
    private static func line(_ name: String, _ values: [Double], _ unit: String) -> String {
        // Percentages of a core are small: one decimal.
        let digits = unit == "%" ? 1 : 0
        let all = values.map { String(format: "%.\(digits)f", $0) }.joined(separator: ", ")
        return
            "\(name.padding(toLength: 48, withPad: " ", startingAt: 0)) \(String(format: "%10.\(digits)f", median(values))) \(unit)   (\(all))"
    }

    /// Each round's throughput and p50 beside a load ÷ alone, and their medians.
    private static func ratios(
        _ name: String, _ throughput: [Double], _ throughputAlone: [Double], _ p50: [Double], _ p50Alone: [Double]
    ) -> String {
        func list(_ beside: [Double], _ alone: [Double]) -> String {
            let values = zip(beside, alone).map { $0 / $1 }
            return values.map { String(format: "%.2f", $0) }.joined(separator: ", ")
                + String(format: " (median %.2f)", median(values))
        }
        return "\(name) ÷ alone: throughput \(list(throughput, throughputAlone)); p50 \(list(p50, p50Alone))"
    }
}
