import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension IntegrationSuite {
    /// The outcomes docs/operations.md and docs/protocol.md promise when something goes wrong, each
    /// reaching a caller from a real broker: a stopping broker, a gone client, a full queue,
    /// workers lost too often, a hung task, a drain that runs out of time.
    @Suite("Failure outcomes reach the caller")
    struct FailureOutcomeTests {
        static func request(_ id: RequestID, _ service: String, attempt: UInt32 = 1, timeout: UInt32 = 0)
            -> [[UInt8]]
        {
            ClientToBroker.request(
                TaskRequest(
                    requestID: id, service: service,
                    header: RequestHeader(attempt: attempt, timeoutMilliseconds: timeout), body: [7])
            ).encode()
        }

        /// A broker with one registered worker (serving "held") that never answers on its own.
        static func withHungWorker(capacity: UInt32 = 4, brokerArguments: [String] = []) async throws -> (
            TestCluster, HungWorker
        ) {
            let cluster = try await TestCluster.start(extraArguments: brokerArguments)
            let worker = try await HungWorker(broker: cluster.workers, services: ["held"], capacity: capacity)
            try await cluster.waitForWorkers(1)
            return (cluster, worker)
        }

        /// A worker's view: a CANCEL for the given delivery arrived.
        static func cancelled(_ worker: HungWorker, tag: DeliveryTag) -> Bool {
            worker.peer.workerCommands.contains { if case .cancel(tag, _) = $0 { true } else { false } }
        }

        /// docs/operations.md: SIGTERM makes the broker answer what is running with `brokerShuttingDown`
        /// and tell every worker DISCONNECT before it exits 0.
        @Test func aStoppingBrokerAnswersRunningRequestsAndDisconnectsItsWorkers() async throws {
            let (cluster, worker) = try await Self.withHungWorker()
            defer {
                cluster.killAll()
                Task { await worker.close() }
            }
            let client = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await client.close() } }
            client.send(Self.request(RequestID(high: 1, low: 1), "held"))
            try await eventually("the worker holds the request") { worker.requests.count == 1 }

            cluster.broker.signal(SIGTERM)
            let replies = try await client.waitForReplies(1)
            #expect(replies.map(\.status) == [.brokerShuttingDown])
            try await eventually("the worker was told DISCONNECT") {
                worker.peer.workerCommands.contains(.disconnect)
            }
            #expect(try await cluster.broker.waitForExit() == 0)
        }

        /// docs/protocol.md: a reply whose client has gone is dropped and counted
        /// (`undeliverableReplies`); a REQUEST repeating a running id only raises the attempt
        /// its reply names.
        @Test func aRepeatedIDRaisesTheAttemptAndAReplyToAGoneClientIsCounted() async throws {
            let (cluster, worker) = try await Self.withHungWorker()
            defer {
                cluster.killAll()
                Task { await worker.close() }
            }

            let client = try await RawPeer(connectingTo: cluster.clients)
            let repeated = RequestID(high: 2, low: 1)
            client.send(Self.request(repeated, "held", attempt: 1))
            try await eventually("the worker holds the request") { worker.requests.count == 1 }
            client.send(Self.request(repeated, "held", attempt: 2))
            try await eventually("the repeat was counted") {
                (try? await cluster.snapshot().counters.duplicateRequests) == 1
            }
            worker.answerAll()
            let replies = try await client.waitForReplies(1)
            #expect(replies.map(\.attempt) == [2], "one reply, naming the latest attempt")
            #expect(worker.requests.count == 1, "the repeat was not delivered again")

            client.send(Self.request(RequestID(high: 2, low: 2), "held"))
            try await eventually("the worker holds the second request") { worker.requests.count == 2 }
            await client.close()
            // A round trip through the broker's clients port after the close, so that its
            // ROUTER has seen the connection end before the reply goes out.
            _ = try await cluster.snapshot()
            worker.answer(worker.requests[1])
            try await eventually("the reply to the gone client was counted") {
                (try? await cluster.snapshot().counters.undeliverableReplies) == 1
            }
        }

        /// docs/operations.md: beyond the queue's bound, calls fail at once with `overloaded`.
        @Test func aFullQueueAnswersOverloadedAtOnce() async throws {
            let (cluster, worker) = try await Self.withHungWorker(
                capacity: 1, brokerArguments: ["--queue-limit", "2", "--client-queue-share", "1"])
            defer {
                cluster.killAll()
                Task { await worker.close() }
            }
            let sky = try await SkyClient(broker: cluster.clients)
            let options = ScanOptions(timeout: nil, retry: .never, coalesce: false)
            let held = (0..<3).map { index in
                Task { try await sky.request(service: "held", body: [UInt8(index)], options: options) }
            }
            try await eventually("one running and two waiting") {
                (try? await cluster.snapshot().totalQueued) == 2
            }
            let refusedAt = ContinuousClock.now
            await #expect(throws: SkyError.self) {
                do {
                    // Bounded, so that a broker that queued it instead fails the test in time.
                    let bounded = ScanOptions(timeout: .seconds(5), retry: .never, coalesce: false)
                    _ = try await sky.request(service: "held", body: [9], options: bounded)
                } catch let error as SkyError {
                    #expect(error.code == .overloaded, "\(error)")
                    throw error
                }
            }
            #expect(ContinuousClock.now - refusedAt < .seconds(1))
            #expect(try await cluster.snapshot().counters.rejectedOverloaded == 1)
            for call in held { call.cancel() }
            await sky.close()
        }

        /// docs/operations.md: a task whose workers keep dying fails with `workerLost` after 3 deliveries
        /// (the broker's default), and is not delivered a fourth time.
        @Test func aTaskWhoseWorkersKeepLeavingFailsWithWorkerLostAfterThreeDeliveries() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let sky = try await SkyClient(broker: cluster.clients)
            let call = Task {
                try await sky.request(
                    service: "doomed", body: [1], options: ScanOptions(timeout: nil, retry: .never, coalesce: false))
            }
            for delivery in 1...3 {
                let worker = try await HungWorker(broker: cluster.workers, services: ["doomed"])
                try await eventually("delivery \(delivery)") { worker.requests.count == 1 }
                worker.peer.send(WorkerToBroker.disconnect.encode())
                await worker.close()
                try await eventually("the worker left") {
                    (try? await cluster.snapshot().workers.count) == 0
                }
            }
            await #expect(throws: SkyError.self) {
                do {
                    _ = try await call.value
                } catch let error as SkyError {
                    #expect(error.code == .workerLost, "\(error)")
                    throw error
                }
            }
            let counters = try await cluster.snapshot().counters
            #expect(counters.failedWorkerLost == 1)
            #expect(counters.requeued == 2)
            await sky.close()
        }

        /// A task hangs while its worker stays alive. SkyClient gives up at its own timeout:
        /// the caller gets `timeout` and the broker passes the client's CANCEL to the worker. A
        /// client that does not cancel (a raw one, or one that died) is answered
        /// `deadlineExceeded` by the broker's lease at the deadline plus the lease grace, and
        /// the worker gets CANCEL then. docs/client.md and docs/operations.md say so.
        @Test func aHungTaskIsTakenAwayAndTheCallerIsAnswered() async throws {
            let (cluster, worker) = try await Self.withHungWorker(brokerArguments: ["--lease-grace", "0.5"])
            defer {
                cluster.killAll()
                Task { await worker.close() }
            }

            let sky = try await SkyClient(broker: cluster.clients)
            let startedAt = ContinuousClock.now
            await #expect(throws: SkyError.self) {
                do {
                    _ = try await sky.request(
                        service: "held", body: [1],
                        options: ScanOptions(timeout: .milliseconds(500), retry: .never, coalesce: false))
                } catch let error as SkyError {
                    #expect(error.code == .timeout, "\(error)")
                    throw error
                }
            }
            let clientGaveUp = ContinuousClock.now - startedAt
            #expect(clientGaveUp >= .milliseconds(500) && clientGaveUp < .milliseconds(1500), "\(clientGaveUp)")
            let first = try #require(worker.requests.first)
            try await eventually("the worker got the client's CANCEL") { Self.cancelled(worker, tag: first.tag) }

            let raw = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await raw.close() } }
            let sentAt = ContinuousClock.now
            raw.send(Self.request(RequestID(high: 3, low: 1), "held", timeout: 500))
            let replies = try await raw.waitForReplies(1)
            let leaseRanOut = ContinuousClock.now - sentAt
            #expect(replies.map(\.status) == [.deadlineExceeded])
            // Deadline 0.5 s + grace 0.5 s, checked every tenth of a heartbeat interval.
            #expect(leaseRanOut >= .milliseconds(1000) && leaseRanOut < .milliseconds(2000), "\(leaseRanOut)")
            let second = try #require(worker.requests.last)
            // The broker sends the reply and the CANCEL together, on two connections: the
            // worker's may arrive a moment after the client's (a fresh-clone CI run saw it late).
            try await eventually("the lease CANCEL reached the worker") { Self.cancelled(worker, tag: second.tag) }
            #expect(try await cluster.snapshot().counters.deadlinesExceeded == 1)
            await sky.close()
        }

        /// docs/worker.md: a worker whose handler outlives `--drain-grace` leaves anyway, and its task
        /// completes on another worker, once.
        @Test func aDrainThatRunsOutOfGraceHandsItsTaskToAnotherWorker() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let leaving = try await cluster.startWorker(
                name: "leaving", capacity: 1, extraArguments: ["--drain-grace", "0.5"])
            let sky = try await SkyClient(broker: cluster.clients)
            let call = Task { try await sky.scan(SleepTask(milliseconds: 2000, tag: 42)) }
            try await eventually("the task runs") { (try? await sky.clusterSnapshot().inFlight) == 1 }

            leaving.signal(SIGTERM)
            #expect(try await leaving.waitForExit() == 0)
            let gone = try await watch.waitForEvents { $0.contains { $0.event == .workerDisconnected } }
                .first { $0.event == .workerDisconnected }
            #expect(gone?.tasksHeld == 1, "it left holding the task")
            #expect(try await sky.clusterSnapshot().queued == ["sky.sleep": 1])

            _ = try await cluster.startWorker(name: "successor", capacity: 1)
            #expect(try await call.value.tag == 42)
            let counters = try await sky.clusterSnapshot().counters
            #expect(counters.requeued == 1)
            #expect(counters.staleReplies == 0, "the leaving worker sent no reply")
            #expect(await sky.unmatchedReplies == 0)
            await sky.close()
            await cluster.stop()
        }
    }
}
