import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

/// What the soak's clients saw: every outcome by task, counted once.
actor SoakLedger {
    private(set) var seen = Set<String>()
    private(set) var duplicates = 0
    private(set) var failures: [String] = []
    private(set) var wrongResults = 0
    private var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

    var finished: Int { seen.count }

    func record(_ key: String, ok: Bool, correct: Bool, failure: String?) {
        if !seen.insert(key).inserted { duplicates += 1 }
        if let failure { failures.append("\(key): \(failure)") }
        if ok && !correct { wrongResults += 1 }
        let count = seen.count
        let ready = waiters.filter { $0.count <= count }
        waiters.removeAll { $0.count <= count }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Returns once at least `count` tasks have finished.
    func waitUntilFinished(_ count: Int) async {
        if seen.count >= count { return }
        await withCheckedContinuation { waiters.append((count, $0)) }
    }
}

extension IntegrationSuite {
    @Suite("Chaos soak: workers killed and frozen, the broker restarted, nothing lost or duplicated")
    struct ChaosTests {
        /// 10,000 by default (CI); `SKY_CHAOS_SCANS=100000` for the long run.
        static let scans = ProcessInfo.processInfo.environment["SKY_CHAOS_SCANS"].flatMap(Int.init) ?? 10_000
        static let seed = ProcessInfo.processInfo.environment["SKY_CHAOS_SEED"].flatMap(UInt64.init) ?? 20_261_122

        @Test(.timeLimit(.minutes(10)))
        func tenThousandScansSurviveKilledAndFrozenWorkersAndABrokerRestart() async throws {
            let state = JobTests.StateDirectory()
            let cluster = try await TestCluster.start(
                extraArguments: TestCluster.fastHeartbeats + ["--task-events"] + state.arguments)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let names = ["c-1", "c-2", "c-3", "c-4"]
            var workers: [String: SkyProcess] = [:]
            for name in names { workers[name] = try await cluster.startWorker(name: name, capacity: 4) }

            var random = SplitMix64(seed: Self.seed)
            var shuffled = names
            shuffled.shuffle(using: &random)
            let (killed, frozen) = (shuffled[0], shuffled[1])
            let total = Self.scans
            let ledger = SoakLedger()
            let sky = try await SkyClient(broker: cluster.clients)
            let options = ScanOptions(retry: RetryPolicy(maxAttempts: 6, initialBackoff: .milliseconds(50)))
            let started = ContinuousClock.now

            // Half scans (results checked against a local scan), half sleeps (echoed back).
            let scanTasks = (0..<total / 2).map { ScanTask(sector: $0, size: 24) }
            let sleepTasks = (0..<total - total / 2).map { SleepTask(milliseconds: 2 + $0 % 9, tag: $0) }
            let scanning = Task {
                for await done in sky.scanAll(scanTasks, concurrency: 64, options: options) {
                    let correct = (try? done.result.get()) == (try? SectorScanner.scan(done.task))
                    await ledger.record(
                        "scan-\(done.index)", ok: (try? done.result.get()) != nil, correct: correct,
                        failure: { if case .failure(let error) = done.result { "\(error)" } else { nil } }())
                }
            }
            let sleeping = Task {
                for await done in sky.scanAll(sleepTasks, concurrency: 64, options: options) {
                    await ledger.record(
                        "sleep-\(done.index)", ok: (try? done.result.get()) != nil,
                        correct: (try? done.result.get()) == done.task,
                        failure: { if case .failure(let error) = done.result { "\(error)" } else { nil } }())
                }
            }

            // A durable load beside them: jobs submitted by a client of their own all through
            // the faults, each fetched afterwards by another.
            let jobCount = Int(2000 / timingScale)
            let submitter = try await SkyClient(broker: cluster.clients)
            let submitting = Task {
                try await withThrowingTaskGroup(of: (Int, JobID).self) { group in
                    var ids = [JobID?](repeating: nil, count: jobCount)
                    for index in 0..<jobCount {
                        group.addTask {
                            (
                                index,
                                try await submitter.submit(
                                    EchoTask(message: "job \(index)"), options: .besideOtherSuites
                                ).id
                            )
                        }
                        if index >= 32, let (done, id) = try await group.next() { ids[done] = id }
                    }
                    for try await (done, id) in group { ids[done] = id }
                    return ids.map { $0! }
                }
            }

            // The seeded schedule: a kill -9 (restarted), a SIGSTOP/SIGCONT, a broker restart.
            var injected: [String] = []
            await ledger.waitUntilFinished(total * 15 / 100)
            workers[killed]!.signal(SIGKILL)
            injected.append("kill -9 \(killed) at \(await ledger.finished) finished")
            _ = try await workers[killed]!.waitForExit()
            workers[killed] = try await cluster.startWorker(name: killed, capacity: 4)

            await ledger.waitUntilFinished(total * 35 / 100)
            let linesBeforeStop = watch.outputLines.count
            workers[frozen]!.signal(SIGSTOP)
            let stoppedAt = ContinuousClock.now
            let stoppedWhen = await ledger.finished
            // The fault: frozen until the broker has declared it dead (its expiry, 1.5 s), then
            // woken with its stale replies.
            _ = try await watch.waitUntil(timeout: .seconds(30)) { lines in
                // Only the lines since the stop, and JSON only for the few that may match.
                lines.dropFirst(linesBeforeStop).contains { line in
                    line.contains("worker.disconnected")
                        && (try? JSONDecoder().decode(SkyEvent.self, from: Data(line.utf8)))?.worker?.name == frozen
                }
            }
            workers[frozen]!.signal(SIGCONT)
            injected.append(
                "SIGSTOP \(frozen) at \(stoppedWhen) finished, until declared dead \(ContinuousClock.now - stoppedAt) later"
            )

            await ledger.waitUntilFinished(total * 60 / 100)
            let linesBeforeRestart = watch.outputLines.count
            cluster.broker.signal(SIGKILL)
            injected.append("kill -9 broker (restarted at once) at \(await ledger.finished) finished")
            _ = try await cluster.broker.waitForExit()
            try await cluster.restartBroker()

            try await value(of: Task { await scanning.value }, within: .seconds(300), "the scans")
            try await value(of: Task { await sleeping.value }, within: .seconds(300), "the sleeps")
            let elapsed = ContinuousClock.now - started
            let jobIDs = try await value(of: submitting, within: .seconds(120), "the job submits")
            await submitter.close()
            let reader = try await SkyClient(broker: cluster.clients)
            var jobsCorrect = 0
            for (index, id) in jobIDs.enumerated()
            where try await reader.result(of: id, as: EchoTask.self).message == "job \(index)" {
                jobsCorrect += 1
            }
            await reader.close()
            print("chaos soak: \(jobCount) durable jobs beside it, \(jobsCorrect) with their result")
            #expect(Set(jobIDs).count == jobCount && jobsCorrect == jobCount)

            let finished = await ledger.finished
            let duplicates = await ledger.duplicates
            let failures = await ledger.failures
            let wrong = await ledger.wrongResults
            let lost = total - finished
            print("chaos soak (seed \(Self.seed)): injected \(injected.joined(separator: "; "))")
            print(
                "chaos soak: \(total) tasks in \(elapsed): lost \(lost), duplicated \(duplicates), "
                    + "failed \(failures.count), wrong results \(wrong)")
            #expect(lost == 0 && duplicates == 0 && wrong == 0)
            #expect(failures.isEmpty, "\(failures.prefix(5))\n\(cluster.diagnostics)")

            // Tasks that ran more than once: only on a faulted worker or across the broker restart.
            let (reruns, runAgain) = Self.rerunsOnHealthyWorkers(
                watch.outputLines, after: linesBeforeRestart, faulted: [killed, frozen])
            print(
                "chaos soak: \(runAgain) tasks were dispatched more than once; "
                    + "\(reruns.count) of those after running on a worker that was not faulted")
            #expect(reruns.isEmpty, "\(reruns.prefix(5))")

            // Once every worker is back, skywatch's table equals the broker's snapshot.
            try await eventually("all four workers registered again", timeout: .seconds(30)) {
                try await sky.clusterSnapshot().workers.count == 4
            }
            let snapshot = try await sky.clusterSnapshot()
            try await watch.waitUntil(timeout: .seconds(10)) { lines in
                (SkyProcess.watchedWorkers(lines[...]) ?? [:]).count == 4
            }
            watch.signal(SIGTERM)
            #expect(try await watch.waitForExit() == 0)
            let table = try JSONDecoder().decode(TableLine.self, from: Data(watch.outputLines.last!.utf8)).table
            func identity(_ workers: [WorkerInfo]) -> [String] {
                workers.map { "\($0.id) \($0.name) \($0.capacity) \($0.services)" }.sorted()
            }
            #expect(identity(table) == identity(snapshot.workers))
            await sky.close()
            await cluster.stop()
        }

        /// Request ids dispatched more than once where an earlier dispatch went to a worker that
        /// was never faulted, within one run of the broker.
        /// Which broker run each dispatch belongs to comes from the events themselves: the
        /// restarted broker numbers its events from 1 again. (skywatch's output lags the kill, so
        /// a line count taken at the kill cannot tell the runs apart.)
        static func rerunsOnHealthyWorkers(
            _ lines: [String], after killLine: Int, faulted: Set<String>
        ) -> (suspicious: [String], dispatchedAgain: Int) {
            let decoder = JSONDecoder()
            var names: [String: String] = [:]  // worker id → name
            var dispatches: [String: [(worker: String, run: Int)]] = [:]
            var run = 1
            var lastSeq: UInt64 = 0
            for (number, line) in lines.enumerated() {
                guard let event = try? decoder.decode(SkyEvent.self, from: Data(line.utf8)) else { continue }
                if number >= killLine && event.seq < lastSeq { run = 2 }
                lastSeq = event.seq
                if let worker = event.worker { names[worker.id] = worker.name }
                if event.event == .taskDispatched, let task = event.task, let worker = task.worker {
                    dispatches[task.requestID, default: []].append((worker, run))
                }
            }
            var suspicious: [String] = []
            for (id, list) in dispatches where list.count > 1 {
                for (index, earlier) in list.dropLast().enumerated() {
                    let later = list[index + 1]
                    let workerName = names[earlier.worker] ?? earlier.worker
                    if earlier.run == later.run && !faulted.contains(workerName) {
                        suspicious.append("\(id): ran on \(workerName), then again")
                    }
                }
            }
            let perRun = dispatches.values.flatMap { $0 }.reduce(into: [0, 0]) { $0[$1.run - 1] += 1 }
            print("chaos soak: task.dispatched events seen: \(perRun[0]) before the broker restart, \(perRun[1]) after")
            return (suspicious, dispatches.values.filter { $0.count > 1 }.count)
        }
    }
}
