import CSkySystem
import Foundation
import Sky
import SkyCLISupport
import SkyWorkloads

/// Runs every measurement a ``BenchSettings`` asks for and collects them in a ``Report``.
struct BenchRun {
    let settings: BenchSettings
    let baseline: BaselinePrograms?

    func run() async throws -> Report {
        var report = Report(machine: .current(compiler: baseline?.compiler), settings: settings)
        if settings.pinned { try pin(toFirstCPU: true) }
        for round in 1...settings.rounds {
            for workers in settings.workerCounts {
                // Alternate which system goes first, so neither always gets the fresher machine.
                var systems: [BenchSystem] = baseline == nil ? [.sky] : [.sky, .baseline]
                if round.isMultiple(of: 2) { systems.reverse() }
                for system in systems {
                    progress("round \(round)/\(settings.rounds): \(system), \(workers) worker(s)")
                    report.samples += try await measure(system, workers: workers, round: round)
                }
            }
            if settings.scanScaling {
                if settings.pinned { try pin(toFirstCPU: false) }
                report.scanScaling += try await scanScaling(round: round)
                if settings.pinned { try pin(toFirstCPU: true) }
            }
        }
        if settings.queueMemoryRequests > 0 {
            progress("broker memory with \(settings.queueMemoryRequests) queued requests")
            report.queueMemory = try await queueMemory(requests: settings.queueMemoryRequests)
        }
        return report
    }

    private func start(_ system: BenchSystem, workers: Int) async throws -> any BenchTarget {
        switch system {
        case .sky:
            return try await SkyTarget.start(
                workers: workers, capacity: settings.capacity, handlers: settings.workerHandlers,
                callers: settings.clientCallers,
                transport: settings.transport)
        case .baseline:
            guard let baseline else { throw BenchError("the baseline was not built") }
            return try await BaselineTarget.start(
                programs: baseline, workers: workers, credits: settings.capacity, transport: settings.transport)
        }
    }

    /// Runs `body` on `target` and stops the target afterwards, whether `body` threw or not.
    private func using<Target: BenchTarget, Result>(
        _ target: Target, _ body: (Target) async throws -> Result
    ) async throws -> Result {
        do {
            let result = try await body(target)
            await target.stop()
            return result
        } catch {
            await target.stop()
            throw error
        }
    }

    private func measure(_ system: BenchSystem, workers: Int, round: Int) async throws -> [Sample] {
        try await using(try await start(system, workers: workers)) { target in
            var samples: [Sample] = []
            for payload in settings.payloads {
                let latency = try await target.latency(
                    payload: payload, requests: settings.latencyRequests, warmup: settings.latencyWarmup)
                samples.append(
                    Sample(
                        round: round, system: system, kind: .latency, workers: workers, payload: payload, inFlight: 1,
                        figures: latency))
                let warmup = Duration.seconds(settings.warmupSeconds)
                let measure = Duration.seconds(settings.measureSeconds)
                func sample(_ kind: Sample.Kind, inFlight: Int, _ figures: Figures) -> Sample {
                    Sample(
                        round: round, system: system, kind: kind, workers: workers, payload: payload,
                        inFlight: inFlight, figures: figures)
                }
                for inFlight in settings.inFlight {
                    let throughput = try await target.throughput(
                        payload: payload, inFlight: inFlight, warmup: warmup, measure: measure)
                    samples.append(sample(.throughput, inFlight: inFlight, throughput))
                }
                // The typed path at the most in flight, against the raw request path above.
                if let sky = target as? SkyTarget, let most = settings.inFlight.max() {
                    let typed = try await sky.typedThroughput(
                        payload: payload, inFlight: most, warmup: warmup, measure: measure)
                    samples.append(sample(.typedThroughput, inFlight: most, typed))
                }
            }
            return samples
        }
    }

    /// sky.scan tasks per second: one worker, two workers, with capacity 1 and = cores.
    private func scanScaling(round: Int) async throws -> [ScanScalingSample] {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        var shapes: [(workers: Int, capacity: Int)] = [(1, 1), (2, 1)]
        if cores > 1 { shapes += [(1, cores), (2, cores)] }
        var samples: [ScanScalingSample] = []
        for shape in shapes {
            progress("round \(round)/\(settings.rounds): sky.scan, \(shape.workers) worker(s) x \(shape.capacity)")
            let target = try await SkyTarget.start(
                workers: shape.workers, capacity: shape.capacity, service: ScanTask.service,
                transport: settings.transport)
            let rate = try await using(target) { try await $0.scanRate(tasks: settings.scanTasks, concurrency: 64) }
            samples.append(
                ScanScalingSample(round: round, workers: shape.workers, capacity: shape.capacity, tasksPerSecond: rate))
        }
        return samples
    }

    /// The broker's heap per queued request: `requests` 64-byte requests for a service no worker
    /// serves, compared with 1,000 queued the same way (which warms the broker's paths).
    private func queueMemory(requests: Int) async throws -> QueueMemoryResult {
        let warm = 1000
        let payload = 64
        let target = try await SkyTarget.start(
            workers: 0, capacity: 1, transport: settings.transport,
            brokerArguments: [
                "--queue-limit", "\(2 * (requests + warm))", "--no-workers-grace", "3600", "--client-queue-share", "1",
            ])
        let client = target.client
        let waiting = ScanOptions(
            timeout: .seconds(600), deadline: nil, retry: RetryPolicy(maxAttempts: 1), coalesce: false)
        let body = [UInt8](repeating: 0x61, count: payload)
        // Calls that wait until the client closes; their outcome does not matter. Unstructured
        // tasks, not a task group: tearing down a group of 100,000 children took minutes (the
        // runtime unlinks each child from a list, swift::TaskGroup::removeChildTask).
        let calls = Task {
            for index in 0..<(warm + requests) {
                if index == warm {
                    // Let the warm-up requests be measured before the rest are sent.
                    while (try? await client.clusterSnapshot().totalQueued) ?? 0 < warm {
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                    try? await Task.sleep(for: .milliseconds(200))
                }
                Task { _ = try? await client.request(service: "bench.nobody", body: body, options: waiting) }
            }
        }
        defer { calls.cancel() }
        let (heapBefore, heapAfter) = try await using(target) { target in
            let before = try await waitForQueue(warm, on: target)
            let after = try await waitForQueue(warm + requests, on: target)
            guard let heapBefore = before.memory, let heapAfter = after.memory else {
                throw BenchError("the broker's snapshot reports no memory")
            }
            return (heapBefore, heapAfter)
        }
        await calls.value
        return QueueMemoryResult(
            queued: requests, payload: payload,
            heapBytesPerRequest: Double(heapAfter.heapInUse - heapBefore.heapInUse) / Double(requests),
            residentBytesPerRequest: Double(heapAfter.resident - heapBefore.resident) / Double(requests))
    }

    /// The broker's snapshot once exactly `count` requests wait.
    private func waitForQueue(_ count: Int, on target: SkyTarget) async throws -> ClusterSnapshot {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            let snapshot = try await target.snapshot()
            if snapshot.totalQueued >= count { return snapshot }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchError("the broker did not queue \(count) requests within 120 s")
    }

    /// Pins every thread of this process, and so every process it starts, to CPU 0; or frees them.
    private func pin(toFirstCPU: Bool) throws {
        let error = toFirstCPU ? sky_set_process_cpus(0, 1) : sky_set_process_cpus(0, 0)
        guard error == 0 else { throw BenchError("cannot set CPU affinity: \(String(cString: strerror(error)))") }
    }
}

/// One line of progress on standard error (the report goes to standard output).
func progress(_ line: String) {
    ProcessSetup.standardError("skybench: \(line)\n")
}
