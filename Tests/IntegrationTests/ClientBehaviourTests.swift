import Foundation
import Sky
import SkyBrokerKit
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

extension InProcessSuite {
    /// SkyClient against a broker and workers in this process: what needs no executable and no
    /// bound tighter than seconds (the rest is in ``IntegrationSuite/ClientTests``).
    @Suite("SkyClient on an in-process cluster: coalescing, priorities, events, fallback, batches, waiting for workers")
    struct ClientBehaviourTests {
        @Test func aHundredEqualConcurrentScansRunOnceAndAllGetTheResult() async throws {
            let cluster = try await InProcessCluster.start()
            try await cluster.startWorker(name: "solo", capacity: 4)
            let sky = try await SkyClient(broker: cluster.clients)
            // Long enough that all 100 calls are made before it finishes, even on a loaded machine.
            let task = SleepTask(milliseconds: 2000, tag: 7)
            let results = try await sky.scanConcurrently(Array(repeating: task, count: 100))
            #expect(results.count == 100 && results.allSatisfy { $0 == task })
            let accepted = try await sky.clusterSnapshot().counters.requestsAccepted
            let statistics = await sky.statistics
            #expect(accepted == 1, "one execution; \(statistics)")
            #expect(statistics.coalesced == 99)

            // Opting out runs every call.
            let separate = ScanOptions(coalesce: false)
            _ = try await sky.scanConcurrently(
                Array(repeating: SleepTask(milliseconds: 50, tag: 8), count: 10), options: separate)
            #expect(try await sky.clusterSnapshot().counters.requestsAccepted == 11)
            await sky.close()
            await cluster.stop()
        }

        /// `ScanOptions.priority` through the real client, broker and worker: with the only
        /// credit busy, an urgent call made after four normal ones runs before them.
        @Test func anUrgentCallOvertakesNormalOnesWaitingForTheWorker() async throws {
            let cluster = try await InProcessCluster.start()
            try await cluster.startWorker(name: "single", capacity: 1)
            let sky = try await SkyClient(broker: cluster.clients)
            let finished = Locked<[Int]>([])
            func call(_ tag: Int, _ priority: JobPriority, milliseconds: Int = 10) -> Task<Void, any Error> {
                Task {
                    let options = ScanOptions(priority: priority)
                    _ = try await sky.scan(SleepTask(milliseconds: milliseconds, tag: tag), options: options)
                    finished.withLock { $0.append(tag) }
                }
            }
            // Long enough that all five wait behind it, even on a loaded machine.
            let blocker = call(0, .normal, milliseconds: Int(2000 * timingScale))
            try await eventually("the blocker runs") { try await sky.clusterSnapshot().inFlight == 1 }
            let normal = (1...4).map { call($0, .normal) }
            try await eventually("four wait") { try await sky.clusterSnapshot().queued["sky.sleep"] == 4 }
            let urgent = call(99, .urgent)
            try await eventually("five wait") { try await sky.clusterSnapshot().queued["sky.sleep"] == 5 }
            for task in [blocker, urgent] + normal { try await task.value }
            // The four normal calls are separate tasks: their order among themselves is theirs.
            let order = finished.withLock { $0 }
            #expect(Array(order.prefix(2)) == [0, 99] && Set(order.dropFirst(2)) == [1, 2, 3, 4], "\(order)")
            await sky.close()
            await cluster.stop()
        }

        /// A client told no events endpoint subscribes where the broker says it bound one: on
        /// `ipc://` (as here) or random ports the clients port + 2 means nothing, and the stream
        /// failed, or on random ports waited for ever, silently (a newcomer's `events()`).
        @Test func eventsFindTheEndpointTheBrokerSays() async throws {
            let cluster = try await InProcessCluster.start()
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(sky.eventsEndpoint == nil, "nothing to derive from an ipc:// endpoint")
            var events = sky.events().makeAsyncIterator()
            guard case .snapshot = try await events.next() else {
                Issue.record("the first element is not a snapshot")
                return
            }
            await sky.close()
            await cluster.stop()
        }

        @Test func eventsStartFromASnapshotAndFollowTheCluster() async throws {
            let cluster = try await InProcessCluster.start()
            var configuration = SkyClient.Configuration()
            configuration.events = cluster.events
            let sky = try await SkyClient(broker: cluster.clients, configuration: configuration)
            var events = sky.events().makeAsyncIterator()
            guard case .snapshot(let snapshot) = try await events.next() else {
                Issue.record("the first element is not a snapshot")
                return
            }
            #expect(snapshot.workers.isEmpty)
            try await cluster.startWorker(name: "newcomer", capacity: 2)
            var lastSeq = snapshot.seq
            var connected: SkyEvent?
            while connected == nil, let element = try await events.next() {
                guard case .event(let event) = element else {
                    Issue.record("a second snapshot without a broker restart")
                    break
                }
                #expect(event.seq > lastSeq)
                lastSeq = event.seq
                if event.event == .workerConnected { connected = event }
            }
            // A stream that ends before the event came is a failure, not a pass.
            #expect(connected?.worker?.name == "newcomer", "the stream ended without worker.connected")
            await sky.close()
            await cluster.stop()
        }

        @Test func aServiceWithoutWorkersFallsBackToTheLocalSystemUntilOneJoins() async throws {
            let cluster = try await InProcessCluster.start()
            let sky = try await SkyClient(
                broker: cluster.clients, configuration: try await IntegrationSuite.ClientPromiseTests.withLocalEcho())
            #expect(try await sky.scan(EchoTask(message: "here")) == EchoTask(message: "here"))
            #expect(await sky.statistics.localRuns == 1)

            try await cluster.startWorker(name: "echoer", capacity: 2)
            try await eventually("scans go to the worker once it serves sky.echo") {
                let before = await sky.statistics.localRuns
                _ = try await sky.scan(EchoTask(message: "there"))
                return await sky.statistics.localRuns == before
            }
            #expect(try await sky.clusterSnapshot().counters.requestsAccepted >= 1)
            await sky.close()
            await cluster.stop()
        }

        /// Every 4th task's first attempt fails; `scanAll` retries them and counts them. Not
        /// the built-in sky.flaky, which fails every 4th call to arrive whoever makes it: with
        /// a worker in this process and 8 callers in step, one task drew that failure on all
        /// five of its attempts (CI, once).
        @Test func scanAllRetriesFlakyTasksAndReportsProgress() async throws {
            let cluster = try await InProcessCluster.start()
            let system = ScanSystem(name: "flaky", capacity: 4)
            await system.registerWithContext(FirstAttemptFails.self) { task, context in
                if task.value % 4 == 0, context.attempt == 1 { throw FirstAttemptFails.Failure() }
                return task
            }
            try await cluster.startWorker(system)
            let sky = try await SkyClient(broker: cluster.clients)
            let options = ScanOptions(
                retry: RetryPolicy(maxAttempts: 5, initialBackoff: .milliseconds(10)).retryingHandlerErrors())
            var last = BatchProgress(total: 0)
            var indexes: [Int] = []
            let tasks = (0..<60).map { FirstAttemptFails(value: $0) }
            for await done in sky.scanAll(tasks, concurrency: 8, options: options) {
                #expect(try done.result.get() == done.task)
                indexes.append(done.index)
                #expect(done.progress.finished == indexes.count)
                last = done.progress
            }
            #expect(indexes.sorted() == Array(0..<60))
            #expect(last.completed == 60 && last.failed == 0 && last.total == 60)
            #expect(last.retried == 15, "each 4th task once: \(last)")
            #expect(last.tasksPerSecond > 0)
            await sky.close()
            await cluster.stop()
        }

        @Test func aRequestSentWithoutWorkersWaitsAndCompletesWhenOneJoins() async throws {
            let cluster = try await InProcessCluster.start()
            let sky = try await SkyClient(broker: cluster.clients)
            let task = ScanTask(sector: 77, size: 64)
            let pending = Task { try await sky.scan(task) }
            try await eventually("a call in flight") { await sky.inFlightCount > 0 }
            // The snapshot request leaves after the scan on the same connection, so the broker has
            // already queued the scan when it answers.
            let before = try await sky.clusterSnapshot()
            #expect(before.workers.isEmpty)
            #expect(before.queued == ["sky.scan": 1])

            try await cluster.startWorker(name: "late", capacity: 1)
            let report = try await pending.value
            #expect(report == (try SectorScanner.scan(task)))
            await sky.close()
            await cluster.stop()
        }

        @Test func aReplyThatIsNotTheResultTypeFailsAsInvalidResult() async throws {
            let cluster = try await InProcessCluster.start()
            try await cluster.startWorker(name: "echo", capacity: 1)
            let sky = try await SkyClient(broker: cluster.clients)
            let error = await #expect(throws: SkyError.self) {
                _ = try await sky.scan(IntegrationTests.Measurement(value: 1.5))
            }
            guard case .invalidResult(let message)? = error else {
                Issue.record("expected invalidResult, got \(String(describing: error))")
                return
            }
            #expect(message.contains("Int"), "\(message)")
            await sky.close()
            await cluster.stop()
        }

        /// A submission the broker refuses (an idempotency key of the broker's own) is
        /// `invalidTask` naming why, not `invalidPayload`, whose advice (client and worker
        /// disagree on the task's type) would mislead: no worker saw it.
        @Test func aSubmitTheBrokerRefusesIsAnInvalidTask() async throws {
            let state = IntegrationSuite.JobTests.StateDirectory()
            let cluster = try await InProcessCluster.start { $0.stateDirectory = state.path }
            let sky = try await SkyClient(broker: cluster.clients)
            do {
                _ = try await sky.submit(EchoTask(message: "x"), options: JobOptions(idempotencyKey: "sky.retry/01"))
                Issue.record("a reserved key was taken")
            } catch SkyError.invalidTask(let message) {
                #expect(message.contains("idempotency keys starting with sky.retry/ are the broker's"), "\(message)")
            }
            await sky.close()
            await cluster.stop()
        }
    }
}

/// A task whose first attempt fails when its value is a multiple of 4.
struct FirstAttemptFails: SkyTask, Equatable {
    static let service = "test.first-attempt-fails"
    typealias Result = FirstAttemptFails
    var value: Int

    struct Failure: Error {}
}
