import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// Faults injected into real processes: the broker must notice, re-dispatch, and give every
    /// call exactly one outcome.
    @Suite("Broker under worker and broker failures")
    struct FailureTests {
        /// 0.5 s × 3: a worker is declared dead 1.5 s after its last sign of life.
        static let expiry: Duration = .milliseconds(1500)

        /// Starts three workers (capacity 2), puts six 2-second sleeps on them, and returns the
        /// cluster, the client, the pending results and the name of a worker that holds tasks.
        static func clusterHoldingWork() async throws -> (
            TestCluster, SkyProcess, [String: SkyProcess], SkyClient, Task<[SleepTask], any Error>, String
        ) {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            let watch = try await cluster.startWatch()
            var workers: [String: SkyProcess] = [:]
            for name in ["w-a", "w-b", "w-c"] { workers[name] = try await cluster.startWorker(name: name, capacity: 2) }
            try await watch.waitForEvents { $0.filter { $0.event == .workerConnected }.count == 3 }
            let sky = try await SkyClient(broker: cluster.clients)
            let results = Task {
                try await sky.scanConcurrently((0..<6).map { SleepTask(milliseconds: 2000, tag: $0) })
            }
            try await eventually("6 calls in flight") { await sky.inFlightCount >= 6 }
            // Sent after the six on the same connection: the broker has placed them all.
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.inFlight == 6)
            let victim = try #require(snapshot.workers.first { ($0.inFlight ?? 0) > 0 }?.name)
            return (cluster, watch, workers, sky, results, victim)
        }

        @Test func killingAWorkerThatHoldsTasksLosesNothingAndDuplicatesNothing() async throws {
            let (cluster, watch, workers, sky, results, victim) = try await Self.clusterHoldingWork()
            defer { cluster.killAll() }
            let killedAt = Date()
            workers[victim]!.signal(SIGKILL)

            let events = try await watch.waitForEvents {
                $0.contains { $0.event == .workerDisconnected && $0.worker?.name == victim }
            }
            let gone = try #require(events.first { $0.event == .workerDisconnected })
            // At most one expiry after the kill, plus the broker's expiry check (a tenth of the
            // heartbeat interval) and 200 ms for its thread's scheduling on a loaded machine.
            let detection = try gone.published(after: killedAt)
            print("kill -9: worker.disconnected published \(detection) after the kill")
            #expect(detection <= Self.expiry + .milliseconds(250), "detected after \(detection)")
            // A killed process's connection drops, so the next heartbeat to it fails at once
            // (unreachable); had the connection stayed up, it would have expired.
            #expect(gone.reason == .unreachable || gone.reason == .expired)
            #expect(gone.tasksHeld == 2)
            #expect(events.filter { $0.event == .taskRedispatched }.count == 2)

            let done: [SleepTask]
            do {
                done = try await value(of: results, "six sleeps after the kill")
            } catch {
                Issue.record("\(error)\n\(cluster.diagnostics)")
                throw error
            }
            #expect(done.map(\.tag).sorted() == Array(0..<6))
            #expect(await sky.unmatchedReplies == 0)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.requeued == 2)
            #expect(snapshot.workers.count == 2)
            await sky.close()
            await cluster.stop()
        }

        /// A task that kills every worker it reaches (a poison pill) takes `--max-deliveries`
        /// workers with it and no more: the broker's redeliveries are the only ones. The client's
        /// default policy retried the broker's final `workerLost` as well, so one such call took
        /// three times as many workers (nine) before its caller heard.
        @Test func aTaskThatKillsEveryWorkerTakesMaxDeliveriesWorkersAndNoMore() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            var workers: [String: SkyProcess] = [:]
            for index in 1...2 {
                workers["p-\(index)"] = try await cluster.startWorker(name: "p-\(index)", capacity: 1)
            }
            try await cluster.waitForWorkers(2)
            let sky = try await SkyClient(broker: cluster.clients)
            let answered = Locked(false)
            let poison = Task {
                defer { answered.withLock { $0 = true } }
                return try await sky.scan(SleepTask(milliseconds: 60_000))
            }
            var killed = 0
            var started = 2
            while killed < 10 {
                var holder: String?
                try await eventually("the task at a worker, or its outcome") {
                    if answered.withLock({ $0 }) { return true }
                    holder = try? await sky.clusterSnapshot().workers.first { ($0.inFlight ?? 0) > 0 }?.name
                    return holder != nil
                }
                guard let name = holder, !answered.withLock({ $0 }) else { break }
                workers[name]!.signal(SIGKILL)
                killed += 1
                started += 1
                workers["p-\(started)"] = try await cluster.startWorker(name: "p-\(started)", capacity: 1)
                try await eventually("worker \(name) declared lost") {
                    (try? await sky.clusterSnapshot().workers.contains { $0.name == name }) == false
                }
            }
            print("a poison task killed \(killed) workers before its caller heard")
            #expect(killed == 3)
            await #expect {
                _ = try await value(of: poison, "the poison task's outcome")
            } throws: { error in
                guard case .workerLost(let message) = error as? SkyError else { return false }
                return message.contains("3 times")
            }
            await sky.close()
            await cluster.stop()
        }

        @Test func aFrozenWorkerIsReplacedAndItsLateRepliesAreDroppedWhenItWakes() async throws {
            let (cluster, watch, workers, sky, results, victim) = try await Self.clusterHoldingWork()
            defer { cluster.killAll() }
            let frozen = workers[victim]!
            let stoppedAt = Date()
            frozen.signal(SIGSTOP)
            let events = try await watch.waitForEvents {
                $0.contains { $0.event == .workerDisconnected && $0.worker?.name == victim && $0.reason == .expired }
            }
            let gone = try #require(events.first { $0.event == .workerDisconnected && $0.worker?.name == victim })
            // Its last heartbeat came at most one interval (0.5 s) before the stop: expired
            // between expiry - interval and expiry after it, plus the broker's check period
            // (50 ms) and 200 ms for its thread's scheduling on a loaded machine.
            let detection = try gone.published(after: stoppedAt)
            print("SIGSTOP: worker.disconnected published \(detection) after the stop")
            #expect(detection >= Self.expiry - .milliseconds(510), "expired after \(detection)")
            #expect(detection <= Self.expiry + .milliseconds(250), "expired after \(detection)")
            let done: [SleepTask]
            do {
                done = try await value(of: results, "six sleeps after the freeze")
            } catch {
                Issue.record("\(error)\n\(cluster.diagnostics)")
                throw error
            }
            #expect(done.map(\.tag).sorted() == Array(0..<6))

            // Wake it: it hears that the broker no longer knows it and registers again. Each of
            // its two sleeps either finished first and replied (the broker drops the reply as
            // stale) or was cancelled by the new registration (the worker says how many): which,
            // depends on whether the handler or the broker's DISCONNECT ran first.
            frozen.signal(SIGCONT)
            try await watch.waitForEvents {
                $0.filter { $0.event == .workerConnected && $0.worker?.name == victim }.count == 2
            }
            @Sendable func cancelled() -> Int {
                frozen.errorText.split(separator: "\n")
                    .filter { $0.contains("cancelled the tasks of the previous connection") }
                    .compactMap { $0.firstMatch(of: /tasks=(\d+)/).flatMap { Int($0.1) } }
                    .reduce(0, +)
            }
            try await eventually("both late tasks accounted for") {
                try await sky.clusterSnapshot().counters.staleReplies + UInt64(cancelled()) == 2
            }
            let snapshot = try await sky.clusterSnapshot()
            print("SIGCONT: \(snapshot.counters.staleReplies) stale replies dropped, \(cancelled()) tasks cancelled")
            #expect(snapshot.workers.map(\.name).sorted() == ["w-a", "w-b", "w-c"])
            #expect(await sky.unmatchedReplies == 0)
            await sky.close()
            await cluster.stop()
        }

        @Test func tenThousandScansAcrossFourWorkersGetExactlyOneReplyEach() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            for index in 1...4 { _ = try await cluster.startWorker(name: "soak-\(index)", capacity: 4) }
            try await watch.waitForEvents { $0.filter { $0.event == .workerConnected }.count == 4 }
            let sky = try await SkyClient(broker: cluster.clients)
            let total = 10_000
            let window = 256
            var seen = Set<Int>()
            var wrong = 0
            try await withThrowingTaskGroup(of: SectorReport.self) { group in
                var next = 0
                while next < min(window, total) {
                    let task = ScanTask(sector: next, size: 16)
                    group.addTask { try await sky.scan(task) }
                    next += 1
                }
                for try await report in group {
                    if !seen.insert(report.sector).inserted { wrong += 1 }
                    if report != (try SectorScanner.scan(ScanTask(sector: report.sector, size: 16))) { wrong += 1 }
                    if next < total {
                        let task = ScanTask(sector: next, size: 16)
                        group.addTask { try await sky.scan(task) }
                        next += 1
                    }
                }
            }
            print("10,000 scans across 4 workers: \(seen.count) distinct results, \(wrong) wrong")
            #expect(seen.count == total)
            #expect(wrong == 0)
            #expect(await sky.unmatchedReplies == 0)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.requestsAccepted == UInt64(total))
            #expect(snapshot.counters.staleReplies == 0)
            #expect(snapshot.counters.requeued == 0)
            let events = watch.events
            #expect(events.filter { $0.event == .workerConnected }.count == 4)
            #expect(events.filter { $0.event == .workerDisconnected }.isEmpty)
            #expect(events.filter { $0.event == .taskFailed }.isEmpty)
            await sky.close()
            await cluster.stop()
        }

        @Test func workersRegisterAgainWithARestartedBroker() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            _ = try await cluster.startWorker(name: "r-1", capacity: 2)
            _ = try await cluster.startWorker(name: "r-2", capacity: 2)
            try await watch.waitForEvents { $0.filter { $0.event == .workerConnected }.count == 2 }

            cluster.broker.signal(SIGKILL)
            _ = try await cluster.broker.waitForExit()
            let linesBefore = watch.outputLines.count
            try await cluster.restartBroker()
            let restartedAt = ContinuousClock.now
            // The watcher reconnects by itself; the new broker's greeting names a new run, so
            // it takes a new snapshot and then sees the workers register again. Only what was
            // printed after the restart counts.
            try await watch.waitUntil(timeout: .seconds(15)) { lines in
                let workers = SkyProcess.watchedWorkers(lines.dropFirst(linesBefore))
                return workers.map { Set($0.values.map(\.name)) } == ["r-1", "r-2"]
            }
            // Expiry on the worker's side plus at most one jittered backoff (1 s + 20 %).
            let registeredAgain = ContinuousClock.now - restartedAt
            print("broker restart: both workers registered again \(registeredAgain) after the new broker started")
            #expect(registeredAgain <= Self.expiry + .milliseconds(1200) + .seconds(1))
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.scan(EchoTask(message: "after restart")).message == "after restart")
            await sky.close()
            await cluster.stop()
        }

        @Test func cancellingACallCancelsTheHandlerOnTheWorker() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            _ = try await cluster.startWorker(name: "single", capacity: 1)
            try await watch.waitForEvents { $0.contains { $0.event == .workerConnected } }
            let sky = try await SkyClient(broker: cluster.clients)
            let long = Task { try await sky.scan(SleepTask(milliseconds: 10_000, tag: 1)) }
            try await eventually("a call in flight") { await sky.inFlightCount > 0 }
            #expect(try await sky.clusterSnapshot().inFlight == 1)
            let cancelledAt = ContinuousClock.now
            long.cancel()
            await #expect(throws: CancellationError.self) { try await long.value }
            // The worker's only slot is free again long before the 10 s sleep would end.
            let next = try await sky.scan(EchoTask(message: "next"))
            #expect(next.message == "next")
            #expect(ContinuousClock.now - cancelledAt < .seconds(2))
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.cancelled == 1)
            #expect(snapshot.inFlight == 0)
            await sky.close()
            await cluster.stop()
        }

        /// A handler that ignores its cancellation (`try? await Task.sleep`) keeps its slot past
        /// its deadline and the lease grace, and no other call pays for it. Before, the broker
        /// took the credit back at the lease and sent the next task to the worker whose only
        /// slot was still taken, and that call failed `overloaded` at once.
        @Test func aHandlerThatIgnoresItsCancellationKeepsItsSlotAndNoOtherCallPays() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--lease-grace", "0.2"])
            defer { cluster.killAll() }
            let stubborn = try await cluster.startWorker(name: "stubborn", capacity: 1)
            try await cluster.waitForWorkers(1)
            let sky = try await SkyClient(broker: cluster.clients)
            let once = ScanOptions(timeout: .milliseconds(200), retry: .never)
            await #expect {
                _ = try await sky.scan(SleepTask(milliseconds: 60_000, ignoresCancellation: true), options: once)
            } throws: { ($0 as? SkyError)?.code == .timeout }
            try await eventually("the broker's word on the stuck handler") {
                cluster.broker.errorText.contains("slot stays taken")
            }
            _ = try await cluster.startWorker(name: "fine", capacity: 1)
            try await cluster.waitForWorkers(2)
            var failures: [String] = []
            for tag in 0..<30 {
                do {
                    _ = try await sky.scan(SleepTask(milliseconds: 5, tag: tag), options: ScanOptions(retry: .never))
                } catch {
                    failures.append("\(error)")
                }
            }
            #expect(failures.isEmpty, "\(failures.count) of 30 failed, the first: \(failures.first ?? "")")
            let workers = try await sky.clusterSnapshot().workers
            #expect(workers.first { $0.name == "stubborn" }?.inFlight == 1, "its slot is still taken")
            #expect(workers.first { $0.name == "fine" }?.completed == 30)
            await sky.close()
            stubborn.signal(SIGKILL)  // its drain would wait for the handler
            await cluster.stop()
        }

        @Test func aStoppingBrokerAnswersWaitingRequestsAndExitsZero() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let sky = try await SkyClient(broker: cluster.clients)
            let calls = Task {
                await withTaskGroup(of: String.self) { group in
                    for sector in 0..<3 {
                        group.addTask {
                            do {
                                // No retry: the broker's own answer is what this test is about.
                                _ = try await sky.scan(
                                    ScanTask(sector: sector, size: 16), options: ScanOptions(retry: .never))
                                return "ok"
                            } catch {
                                return "\(error)"
                            }
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
            }
            try await eventually("3 calls in flight") { await sky.inFlightCount >= 3 }
            #expect(try await sky.clusterSnapshot().totalQueued == 3)
            cluster.broker.signal(SIGTERM)
            let outcomes = await calls.value
            #expect(outcomes.count == 3)
            #expect(
                outcomes.allSatisfy { $0.hasPrefix("the broker is unreachable: the broker shut down") }, "\(outcomes)")
            #expect(try await cluster.broker.waitForExit() == 0)
            await sky.close()
        }
    }
}
