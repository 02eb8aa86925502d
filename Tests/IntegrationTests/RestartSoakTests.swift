import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension ThirdLineSuite {
    /// The broker restarted over and over, gracefully (SIGTERM) and not (`kill -9`), down for a
    /// tenth of a second to several seconds, while calls and durable jobs run: after every
    /// restart every worker is registered again within 2 s of the broker being back, a client's
    /// next call, skywatch's next snapshot and skyweb's next state arrive, and no worker gains
    /// descriptors or threads. Every call is answered once and every job has one outcome.
    ///
    /// `SKY_RESTART_ROUNDS=G,K` sets the graceful and kill rounds (the issue's long run: 50,20).
    @Suite("Restart soak: graceful and kill -9 broker restarts, every peer back each time")
    struct RestartSoakTests {
        static let rounds: (graceful: Int, killed: Int) = {
            let parts = (ProcessInfo.processInfo.environment["SKY_RESTART_ROUNDS"] ?? "")
                .split(separator: ",").compactMap { Int($0) }
            return parts.count == 2 ? (parts[0], parts[1]) : (14, 8)
        }()

        /// Descriptors and threads of a process, from /proc.
        static func resources(of pid: Int32) -> (descriptors: Int, threads: Int) {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").count) ?? -1
            return (files, threads)
        }

        struct WebState: Decodable {
            struct Worker: Decodable { var id: String }
            var reachable: Bool
            var workers: [Worker]
        }

        @Test func everyPeerComesBackAfterEveryBrokerRestart() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-restart-\(UUID())")
            defer { try? FileManager.default.removeItem(at: state) }
            let cluster = try await TestCluster.start(extraArguments: ["--state-dir", state.path])
            defer { cluster.killAll() }
            var workers: [SkyProcess] = []
            for index in 0..<4 {
                workers.append(
                    try await cluster.startWorker(
                        name: "idle-\(index)", capacity: 2, extraArguments: ["--workloads", "sky.echo"]))
                workers.append(
                    try await cluster.startWorker(
                        name: "busy-\(index)", capacity: 2, extraArguments: ["--workloads", "sky.sleep"]))
            }
            try await cluster.waitForWorkers(8)
            let watch = try await cluster.startWatch()
            let web = cluster.track(
                try SkyProcess(
                    "skyweb", ["--broker", cluster.clients, "--events", cluster.events, "--listen", "127.0.0.1:0"]))
            let webReady = try await web.waitForLine { $0.hasPrefix("skyweb ready ") }
            let webURL = try #require(
                webReady.split(separator: " ").first { $0.hasPrefix("url=") }.map { "\($0.dropFirst(4))api/state" })

            // Calls that keep the busy workers busy across every restart: each is answered once.
            let sky = try await SkyClient(broker: cluster.clients)
            let ledger = SoakLedger()
            let calling = Locked(true)
            let callers = Task {
                await withTaskGroup(of: Void.self) { group in
                    for caller in 0..<8 {
                        group.addTask {
                            var number = 0
                            while calling.withLock({ $0 }) {
                                number += 1
                                let key = "\(caller)-\(number)"
                                let task = SleepTask(milliseconds: 20, tag: caller * 1_000_000 + number)
                                // No deadline: a call rides out the broker's 30 s absence.
                                let options = ScanOptions(
                                    timeout: .seconds(30), deadline: nil, retry: RetryPolicy(maxAttempts: 10),
                                    coalesce: false)
                                do {
                                    let result = try await sky.scan(task, options: options)
                                    await ledger.record(key, ok: true, correct: result == task, failure: nil)
                                } catch {
                                    await ledger.record(key, ok: false, correct: false, failure: "\(error)")
                                }
                            }
                        }
                    }
                }
            }
            defer { callers.cancel() }

            var jobs: [(job: Job<SleepTask>, task: SleepTask)] = []
            var baseline: [Int32: (descriptors: Int, threads: Int)] = [:]
            var slowest = Duration.zero
            var generator = SplitMix64(seed: 44)
            let schedule =
                Array(repeating: SIGTERM, count: Self.rounds.graceful)
                + Array(repeating: SIGKILL, count: Self.rounds.killed)
            var order = schedule
            order.shuffle(using: &generator)
            for (round, signal) in order.enumerated() {
                for number in 0..<3 {
                    let task = SleepTask(milliseconds: 10, tag: round * 10 + number)
                    jobs.append((try await sky.submit(task, options: .besideOtherSuites), task))
                }
                let before = await ledger.finished
                let snapshotsBefore = watch.outputLines.count { $0.hasPrefix(#"{"snapshot":"#) }
                cluster.broker.signal(signal)
                _ = try await cluster.broker.waitForExit(timeout: .seconds(20))
                // Down for 0.1–0.6 s, once for 5 s and once for 30 s: longer than the workers'
                // liveness (3 s), so that they back off and libzmq's reconnects space out.
                let down: Duration =
                    round == 3
                    ? .seconds(30)
                    : round == order.count - 2
                        ? .seconds(5)
                        : .milliseconds(100 + Int(generator.next() % 500))
                try await Task.sleep(for: down)  // the scenario: the broker stays down this long
                try await cluster.restartBroker()
                let back = ContinuousClock.now
                let registered =
                    (try? await eventually("round \(round): every worker back", timeout: .seconds(10)) {
                        (try? await cluster.snapshot())?.workers.count == 8
                    }) != nil
                let took = ContinuousClock.now - back
                slowest = max(slowest, took)
                let kind = signal == SIGTERM ? "SIGTERM" : "kill -9"
                #expect(registered, "round \(round) (\(kind), down \(down)): not every worker came back")
                #expect(
                    took < .seconds(2) * timingScale,
                    "round \(round) (\(kind), down \(down)): workers back after \(took)")
                guard registered else {
                    Issue.record("\(cluster.diagnostics)")
                    break
                }
                // The client's next call, skywatch's next snapshot and skyweb's next state.
                try await eventually("round \(round): calls are answered again") {
                    await ledger.finished > before + 8
                }
                try await eventually("round \(round): skywatch shows the new broker") {
                    watch.outputLines.count { $0.hasPrefix(#"{"snapshot":"#) } > snapshotsBefore
                }
                // Both read now: a worker that registers once more meanwhile (a new routing id)
                // must not leave the check comparing against a set that no longer exists.
                var lastSeen = ""
                do {
                    try await eventually("round \(round): skyweb shows the new broker's workers") {
                        guard let (data, _) = try? await URLSession.shared.data(from: URL(string: webURL)!),
                            let shown = try? JSONDecoder().decode(WebState.self, from: data),
                            let expected = try? await cluster.snapshot().workers.map(\.id)
                        else { return false }
                        lastSeen =
                            "skyweb \(shown.reachable) \(shown.workers.map(\.id).sorted()), broker \(expected.sorted())"
                        return shown.reachable && Set(shown.workers.map(\.id)) == Set(expected)
                    }
                } catch {
                    Issue.record("\(error): last seen \(lastSeen)")
                    break
                }
                for worker in workers {
                    let now = Self.resources(of: worker.pid)
                    guard let first = baseline[worker.pid] else {
                        baseline[worker.pid] = now
                        continue
                    }
                    #expect(
                        now.descriptors <= first.descriptors + 2 && now.threads <= first.threads + 2,
                        "round \(round): \(worker.name) has \(now.descriptors) descriptors and \(now.threads) threads (\(first.descriptors) and \(first.threads) after the first restart)"
                    )
                }
            }
            calling.withLock { $0 = false }
            await callers.value
            // One outcome each: the job's own result, whichever broker ran it.
            for (job, task) in jobs {
                #expect(try await job.value == task)
            }
            let finished = await ledger.finished
            let failures = await ledger.failures
            #expect(await ledger.duplicates == 0)
            #expect(await ledger.wrongResults == 0)
            #expect(failures.isEmpty, "\(failures.prefix(5))")
            print(
                "restart soak: \(order.count) restarts (\(Self.rounds.graceful) SIGTERM, \(Self.rounds.killed) kill -9), slowest return of all 8 workers \(slowest), \(finished) calls answered, \(jobs.count) jobs ended; descriptors and threads per worker after the first restart and now: \(workers.map { "\($0.name) \(baseline[$0.pid].map { "\($0.descriptors)/\($0.threads)" } ?? "?") → \(Self.resources(of: $0.pid).descriptors)/\(Self.resources(of: $0.pid).threads)" })"
            )
            await sky.close()
        }
    }
}
