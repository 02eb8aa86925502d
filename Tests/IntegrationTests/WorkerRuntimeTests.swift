import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

/// The example worker's task, declared again on the client side, as another application would.
struct WordCount: SkyTask {
    static let service = "example.wordcount"
    typealias Result = Counts
    var text: String
}

struct Counts: Codable, Sendable, Equatable {
    var words: Int
    var characters: Int
}

extension IntegrationSuite {
    @Suite("Worker runtime: drain, errors, heartbeats under load, custom workers")
    struct WorkerRuntimeTests {
        @Test func sigtermLetsRunningTasksFinishAndHandsNoWorkToTheDrainingWorker() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let draining = try await cluster.startWorker(name: "drainer", capacity: 4)
            try await watch.waitForEvents { $0.contains { $0.event == .workerConnected } }
            let sky = try await SkyClient(broker: cluster.clients)
            let first = Task {
                try await sky.scanConcurrently((0..<4).map { SleepTask(milliseconds: 2000, tag: $0) })
            }
            try await eventually("4 calls in flight") { await sky.inFlightCount >= 4 }
            #expect(try await sky.clusterSnapshot().inFlight == 4)

            draining.signal(SIGTERM)
            try await watch.waitForEvents { $0.contains { $0.event == .workerDraining } }
            // Work sent now must not go to the draining worker: it waits for another one.
            let later = Task {
                try await sky.scanConcurrently((10..<12).map { SleepTask(milliseconds: 10, tag: $0) })
            }
            try await eventually("6 calls in flight") { await sky.inFlightCount >= 6 }
            #expect(try await sky.clusterSnapshot().queued == ["sky.sleep": 2])

            #expect(try await value(of: first, "the four sleeps held at SIGTERM").map(\.tag).sorted() == [0, 1, 2, 3])
            #expect(try await draining.waitForExit() == 0)
            let gone = try await watch.waitForEvents { $0.contains { $0.event == .workerDisconnected } }
                .first { $0.event == .workerDisconnected }
            #expect(gone?.reason == .graceful)
            #expect(gone?.tasksHeld == 0)

            _ = try await cluster.startWorker(name: "successor", capacity: 2)
            #expect(try await value(of: later, "the two sleeps sent while draining").map(\.tag).sorted() == [10, 11])
            #expect(await sky.unmatchedReplies == 0)
            await sky.close()
            await cluster.stop()
        }

        @Test func aSecondSignalEndsTheDrainAtOnceAndTheTaskGoesBackToTheQueue() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let worker = try await cluster.startWorker(
                name: "impatient", capacity: 1, extraArguments: ["--drain-grace", "60"])
            try await watch.waitForEvents { $0.contains { $0.event == .workerConnected } }
            let sky = try await SkyClient(broker: cluster.clients)
            let held = Task { try await sky.scan(SleepTask(milliseconds: 30_000)) }
            try await eventually("a call in flight") { await sky.inFlightCount > 0 }
            #expect(try await sky.clusterSnapshot().inFlight == 1)
            worker.signal(SIGTERM)
            try await watch.waitForEvents { $0.contains { $0.event == .workerDraining } }
            let secondAt = ContinuousClock.now
            worker.signal(SIGTERM)
            #expect(try await worker.waitForExit() == 1)
            #expect(ContinuousClock.now - secondAt < .seconds(2))
            // The broker notices the worker is gone and puts its task back in the queue.
            try await watch.waitForEvents { $0.contains { $0.event == .taskRedispatched } }
            #expect(try await sky.clusterSnapshot().queued == ["sky.sleep": 1])
            held.cancel()
            await sky.close()
            await cluster.stop()
        }

        @Test func flakyFailuresReachTheCallerAsTypedErrorsWithTheHandlersMessage() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "flaky", capacity: 1, extraArguments: ["--flaky-every", "3"])
            let sky = try await SkyClient(broker: cluster.clients)
            var failures: [SkyError] = []
            for value in 1...6 {
                do {
                    #expect(try await sky.scan(FlakyTask(value: value)).value == value)
                } catch let error as SkyError {
                    failures.append(error)
                }
            }
            #expect(failures.count == 2)
            guard case .remote(let type, let message) = failures.first else {
                Issue.record("expected a remote handler error, got \(failures)")
                return
            }
            #expect(type.hasSuffix("FlakyFailure"))
            #expect(message.hasPrefix("simulated failure on call 3"))
            await sky.close()
            await cluster.stop()
        }

        /// Handlers keep every core busy for five times the heartbeat expiry; heartbeats come from
        /// the I/O thread, so the worker is never declared dead.
        @Test func aWorkerWhoseHandlersSaturateEveryCoreStaysConnected() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let cores = ProcessInfo.processInfo.activeProcessorCount
            _ = try await cluster.startWorker(name: "busy", capacity: cores)
            try await watch.waitForEvents { $0.contains { $0.event == .workerConnected } }
            let sky = try await SkyClient(broker: cluster.clients)
            let expiry = Duration.milliseconds(1500)
            let start = ContinuousClock.now
            // Large scans: CPU-bound for long stretches, no suspension points inside.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<cores * 2 {
                    group.addTask {
                        var sector = lane * 1000
                        while ContinuousClock.now - start < expiry * 5 {
                            _ = try await sky.scan(ScanTask(sector: sector, size: 1024))
                            sector += 1
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(ContinuousClock.now - start >= expiry * 5)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.workersExpired == 0)
            #expect(snapshot.workers.map(\.name) == ["busy"])
            #expect(!watch.events.contains { $0.event == .workerDisconnected })
            await sky.close()
            await cluster.stop()
        }

        /// The documented worker, 25 lines on `WorkerOptions.main`, serves its own service and
        /// takes skyworker's flags: its name and capacity reach the broker, its ready line names
        /// its metrics endpoint, which serves its handler's series.
        @Test func theExampleWorkerServesItsCustomServiceWithSkyworkersFlags() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let watch = try await cluster.startWatch()
            let worker = cluster.track(
                try SkyProcess(
                    "sky-example-worker",
                    ["--broker", cluster.workers, "--name", "words-1", "--capacity", "3", "--metrics", "127.0.0.1:0"]))
            try await watch.waitForEvents {
                $0.contains {
                    $0.event == .workerConnected && $0.worker?.services == ["example.wordcount"]
                        && $0.worker?.name == "words-1" && $0.worker?.capacity == 3
                }
            }
            let ready = try await worker.waitForLine { $0.hasPrefix("sky-example-worker ready ") }
            #expect(ready.contains("name=words-1 capacity=3"), "\(ready)")
            let sky = try await SkyClient(broker: cluster.clients)
            let counts = try await sky.scan(WordCount(text: "the quick brown fox"))
            #expect(counts == Counts(words: 4, characters: 19))
            let metrics = try await SecondLineSuite.MetricsTests.fetch(
                try SecondLineSuite.MetricsTests.url(in: [ready], of: "sky-example-worker"))
            #expect(
                metrics.contains(#"sky_worker_tasks_total{service="example.wordcount",outcome="ok"} 1"#), "\(metrics)")
            await sky.close()
            await cluster.stop()
        }
    }
}

extension IntegrationSuite.WorkerRuntimeTests {
    /// The ready line means a broker answered: printed when none listened yet, it let a
    /// script go on with no broker (worker.md promised the line once the connection is up).
    @Test func theReadyLineWaitsForABrokerToAnswer() async throws {
        let workers = try await unusedEndpoint()
        let worker = try SkyProcess(
            "skyworker", ["--broker", workers, "--name", "early"] + TestCluster.fastHeartbeats)
        defer { worker.killNow() }
        try await worker.waitForLine(onStandardError: true) { $0.contains("nothing listens there") }
        #expect(!worker.outputLines.contains { $0.hasPrefix("skyworker ready ") }, "\(worker.outputLines)")
        let broker = try await StartedBroker.start(workers: workers, arguments: TestCluster.fastHeartbeats)
        defer { broker.process.killNow() }
        try await worker.waitForLine(timeout: .seconds(30)) { $0.hasPrefix("skyworker ready name=early ") }
    }

    /// docs/protocol.md: a REQUEST the broker sent before it saw the worker's DRAINING crosses
    /// it on the wire; the worker runs it like the ones it held, answers both, and only then
    /// says DISCONNECT. A scripted broker (a raw ROUTER) sends that REQUEST right after the
    /// DRAINING arrives, before its acknowledgement: the crossing, every time.
    @Test func aRequestThatCrossesDrainingOnTheWireIsRunAndAnswered() async throws {
        let broker = try await ScriptedBroker.start()
        defer { broker.stop() }
        func next() async throws -> (peer: [UInt8], command: WorkerToBroker) { try await broker.nextCommand() }
        func request(_ tag: UInt8, _ task: some SkyTask) throws -> [[UInt8]] {
            let body = try JSONEncoder().encode(task)
            return BrokerToWorker.request(
                tag: [0, 0, 0, 0, 0, 0, 0, tag],
                TaskRequest(
                    requestID: RequestID(high: 7, low: UInt64(tag)), service: type(of: task).service, body: Array(body))
            ).encode()
        }

        let worker = try SkyProcess(
            "skyworker", ["--broker", broker.endpoint, "--name", "crossing", "--capacity", "4"])
        defer { worker.killNow() }
        let (peer, ready) = try await next()
        guard case .ready = ready else {
            Issue.record("expected READY, got \(ready)")
            return
        }
        // Garbage from the "broker" first: dropped with a log line, and the worker goes on.
        broker.send(to: peer, [Array("SKYW01".utf8), [0x7f]])
        broker.send(to: peer, try request(1, SleepTask(milliseconds: 300, tag: 1)))
        try await worker.waitForLine { $0.hasPrefix("skyworker ready ") }
        worker.signal(SIGTERM)
        let draining = try await next()
        #expect(draining.command == .draining)
        // Sent before this broker "saw" the DRAINING: it crosses it on the wire.
        broker.send(to: peer, try request(2, EchoTask(message: "crossed")))
        broker.send(to: peer, BrokerToWorker.drainingAcknowledged.encode())
        var replies: [UInt8: TaskReply] = [:]
        var disconnectedAfter: Int?
        while disconnectedAfter == nil {
            switch try await next().command {
            case .reply(let tag, let reply): replies[tag.bytes.array.last ?? 0] = reply
            case .disconnect: disconnectedAfter = replies.count
            default: continue
            }
        }
        #expect(disconnectedAfter == 2, "both answered before DISCONNECT")
        #expect(replies[1]?.status == .ok)
        #expect(replies[2]?.status == .ok)
        let echoed = try replies[2].map { try JSONDecoder().decode(EchoTask.self, from: Data($0.body)) }
        #expect(echoed == EchoTask(message: "crossed"))
        #expect(try await worker.waitForExit() == 0)
        #expect(worker.errorText.contains("dropped a malformed message from the broker"), "\(worker.errorText)")
    }
}

extension IntegrationSuite.WorkerRuntimeTests {
    /// docs/protocol.md, REQUEST and CANCEL to a worker, from a broker that breaks the credit
    /// rule and repeats itself (a raw ROUTER): round after round, four long tasks fill the
    /// capacity, a fifth goes beyond it, the first is sent again, all four are cancelled, and a
    /// CANCEL names a tag never sent. Every delivery gets exactly one REPLY (`overloaded` at once
    /// beyond the capacity, `cancelled` once its handler returned), the repeat none of its own;
    /// and the runners that ended with their cancelled tasks leave the worker serving.
    @Test func aBrokerThatFloodsRepeatsAndCancelsGetsOneReplyPerDelivery() async throws {
        let broker = try await ScriptedBroker.start()
        defer { broker.stop() }
        let worker = try SkyProcess("skyworker", ["--broker", broker.endpoint, "--name", "flooded", "--capacity", "4"])
        defer { worker.killNow() }
        let (peer, ready) = try await broker.nextCommand()
        guard case .ready = ready else {
            Issue.record("expected READY, got \(ready)")
            return
        }
        func id(_ number: UInt64) -> RequestID { RequestID(high: 9, low: number) }
        func request(_ number: UInt64, _ task: some SkyTask) throws -> [[UInt8]] {
            BrokerToWorker.request(
                tag: DeliveryTag(number: number),
                TaskRequest(
                    requestID: id(number), service: type(of: task).service, body: Array(try JSONEncoder().encode(task)))
            ).encode()
        }
        var replies: [UInt64: [ReplyStatus]] = [:]
        /// Reads REPLYs until every one of `numbers` has one.
        func collect(_ numbers: some Sequence<UInt64>) async throws {
            let wanted = Set(numbers)
            while !wanted.isSubset(of: Set(replies.keys)) {
                guard case .reply(let tag, let reply) = try await broker.nextCommand().command else { continue }
                replies[tag.number ?? 0, default: []].append(reply.status)
            }
        }
        var next: UInt64 = 1
        for _ in 0..<30 {
            let long = next..<next + 4
            next += 5
            for number in long {
                broker.send(to: peer, try request(number, SleepTask(milliseconds: 60_000, tag: Int(number))))
            }
            broker.send(to: peer, try request(long.upperBound, EchoTask(message: "beyond the capacity")))
            broker.send(
                to: peer, try request(long.lowerBound, SleepTask(milliseconds: 60_000, tag: Int(long.lowerBound))))
            for number in long {
                broker.send(to: peer, BrokerToWorker.cancel(tag: DeliveryTag(number: number), id(number)).encode())
            }
            broker.send(to: peer, BrokerToWorker.cancel(tag: DeliveryTag(number: 999_999), id(999_999)).encode())
            try await collect(long.lowerBound...long.upperBound)
            #expect(long.allSatisfy { replies[$0] == [.cancelled] }, "\(replies)")
            #expect(replies[long.upperBound] == [.overloaded])
        }
        // Served still: the capacity is whole again, and every task runs to its end (sleeps, which
        // a runner left cancelled would end at once with `cancelled`).
        let last = next..<next + 4
        for number in last { broker.send(to: peer, try request(number, SleepTask(milliseconds: 1, tag: Int(number)))) }
        try await collect(last)
        #expect(last.allSatisfy { replies[$0] == [.ok] }, "\(replies)")
        #expect(replies.count == 30 * 5 + 4 && replies.values.allSatisfy { $0.count == 1 }, "\(replies)")
        #expect(replies[999_999] == nil)
    }

    /// The same flood against an inline handler (`--inline-echo`): each request's CANCEL comes
    /// right behind it, often in the same batch, after the I/O thread already ran the handler;
    /// every delivery gets exactly one reply, `ok`, and a cancel of nothing is ignored.
    @Test func aBrokerThatFloodsAndCancelsInlineTasksGetsOneReplyPerDelivery() async throws {
        let broker = try await ScriptedBroker.start()
        defer { broker.stop() }
        let worker = try SkyProcess(
            "skyworker",
            [
                "--broker", broker.endpoint, "--name", "inline", "--capacity", "4", "--workloads", "sky.echo",
                "--inline-echo",
            ])
        defer { worker.killNow() }
        let (peer, ready) = try await broker.nextCommand()
        guard case .ready = ready else {
            Issue.record("expected READY, got \(ready)")
            return
        }
        var replies: [UInt64: [ReplyStatus]] = [:]
        for round in 0..<50 {
            let numbers = UInt64(round * 4 + 1)...UInt64(round * 4 + 4)
            for number in numbers {
                let id = RequestID(high: 7, low: number)
                broker.send(
                    to: peer,
                    BrokerToWorker.request(
                        tag: DeliveryTag(number: number),
                        TaskRequest(requestID: id, service: EchoTask.service, body: Array("\(number)".utf8))
                    ).encode())
                broker.send(to: peer, BrokerToWorker.cancel(tag: DeliveryTag(number: number), id).encode())
            }
            broker.send(
                to: peer, BrokerToWorker.cancel(tag: DeliveryTag(number: 999_999), RequestID(high: 7, low: 0)).encode())
            while !numbers.allSatisfy({ replies[$0] != nil }) {
                guard case .reply(let tag, let reply) = try await broker.nextCommand().command else { continue }
                #expect(reply.body == Array("\(tag.number ?? 0)".utf8) || reply.status != .ok)
                replies[tag.number ?? 0, default: []].append(reply.status)
            }
        }
        #expect(replies.count == 200 && replies.values.allSatisfy { $0 == [.ok] }, "\(replies)")
        #expect(replies[999_999] == nil)
    }
}
