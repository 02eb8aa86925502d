import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// What docs/client.md promises about a call's deadline, the local fallback, failover and
    /// `scanAll`, each against a fake broker (a raw ROUTER) that the test drives message by
    /// message.
    @Suite("SkyClient promises")
    struct ClientPromiseTests {
        static func expectError(_ code: SkyError.Code, _ body: () async throws -> Void) async {
            await #expect(throws: SkyError.self) {
                do {
                    try await body()
                } catch let error as SkyError {
                    #expect(error.code == code, "\(error)")
                    throw error
                }
            }
        }

        /// A client configuration whose local fallback serves `sky.echo` in-process.
        static func withLocalEcho() async throws -> SkyClient.Configuration {
            let local = ScanSystem(name: "in-process", capacity: 2)
            try await BuiltInWorkloads.register([EchoTask.service], on: local)
            var configuration = SkyClient.Configuration()
            configuration.localFallback = local
            return configuration
        }

        /// `ScanOptions.deadline` bounds the whole call: it ends in `timeout` when the deadline
        /// passes, although the attempt's own timeout is far away, and the call is cancelled at
        /// the broker.
        @Test(.timeLimit(.minutes(1)))
        func aCallsDeadlineEndsItAndCancelsItAtTheBroker() async throws {
            // Connected first: a call whose deadline passes while it waits for a connection
            // never goes out, and there would be no request to wait for (seen under TSan).
            let (broker, sky) = try await FakeBroker.startWithConnectedClient()
            let startedAt = ContinuousClock.now
            let call = Task {
                try await sky.request(
                    service: "svc", body: [1], options: ScanOptions(timeout: .seconds(30), deadline: .milliseconds(400))
                )
            }
            let sent = try #require(await broker.nextRequest().request)
            await Self.expectError(.timeout) { _ = try await call.value }
            let elapsed = ContinuousClock.now - startedAt
            #expect(
                elapsed >= .milliseconds(400) && elapsed < .milliseconds(400) + Duration.seconds(1).scaled, "\(elapsed)"
            )
            let cancel = await broker.next().command
            #expect(cancel == .cancel(sent.requestID))
            await sky.close()
            await broker.stop()
        }

        /// With a local fallback, a call runs in-process when the broker cannot be reached
        /// (after `localFallbackWait`; later calls at once).
        @Test func theLocalFallbackRunsCallsWhileTheBrokerIsUnreachable() async throws {
            var configuration = try await Self.withLocalEcho()
            configuration.localFallbackWait = .milliseconds(300)
            let sky = try await SkyClient(broker: try await unusedEndpoint(), configuration: configuration)
            let firstAt = ContinuousClock.now
            #expect(try await sky.scan(EchoTask(message: "a")) == EchoTask(message: "a"))
            let first = ContinuousClock.now - firstAt
            #expect(first >= .milliseconds(300) && first < .seconds(2), "the first call waited \(first)")
            let secondAt = ContinuousClock.now
            #expect(try await sky.scan(EchoTask(message: "b")) == EchoTask(message: "b"))
            let second = ContinuousClock.now - secondAt
            #expect(second < .milliseconds(200), "later calls run at once: \(second)")
            #expect(await sky.statistics.localRuns == 2)
            await sky.close()
        }

        /// With a local fallback and a reachable broker, the client asks the broker whether a
        /// worker serves the service (`mmi.service`) at most once a second, whatever the number
        /// of calls.
        @Test func mmiServiceIsAskedAtMostOnceASecond() async throws {
            let broker = try await FakeBroker.start()
            let asked = Locked(0)
            let answering = Task {
                while !Task.isCancelled {
                    let received = await broker.nextRequest()
                    guard let request = received.request, request.service == "mmi.service" else { continue }
                    asked.withLock { $0 += 1 }
                    broker.reply(
                        to: received.peer, TaskReply(requestID: request.requestID, status: .ok, body: Array("404".utf8))
                    )
                }
            }
            defer { answering.cancel() }
            // On a manual clock, so that the second is exact: the answer is trusted until a
            // second has passed on the client's clock, and not a nanosecond longer.
            let clock = ManualClock()
            var configuration = try await Self.withLocalEcho()
            configuration.clock = clock
            configuration.connectTimeout = .seconds(3600)  // connecting takes real time
            let sky = try await SkyClient(broker: broker.endpoint, configuration: configuration)
            var calls = 0
            func call() async throws {
                #expect(try await sky.scan(EchoTask(message: "\(calls)")) == EchoTask(message: "\(calls)"))
                calls += 1
            }
            for _ in 0..<20 { try await call() }
            #expect(asked.withLock { $0 } == 1, "\(calls) calls asked once")
            clock.advance(by: .seconds(1) - .nanoseconds(1))
            try await call()
            #expect(asked.withLock { $0 } == 1, "the answer is still trusted just before a second")
            clock.advance(by: .nanoseconds(1))
            try await call()
            #expect(asked.withLock { $0 } == 2, "asked again once the answer was a second old")
            #expect(await sky.statistics.localRuns == calls)
            await sky.close()
            await broker.stop()
        }

        /// A caller's "never" as a timeout and a deadline (`Int64.max` seconds) arms the I/O
        /// thread's alarm as a time that never comes: the call is answered, and a call the
        /// broker never answers ends with its caller's cancellation, once.
        @Test func absurdTimeoutsAreAnsweredAndCancellable() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(brokers: [broker.endpoint])
            let never = ScanOptions(timeout: .seconds(Int64.max), deadline: .seconds(Int64.max))
            let one = Task { try await sky.request(service: "svc", body: [1], options: never) }
            broker.echo(await broker.nextRequest())
            #expect(try await one.value == [1])
            let two = Task { try await sky.request(service: "svc", body: [2], options: never) }
            _ = await broker.nextRequest()
            two.cancel()
            await #expect(throws: CancellationError.self) { try await two.value }
            await sky.close()
            await broker.stop()
        }

        /// With several endpoints, a client whose established connection drops goes on with
        /// the next endpoint: the next call is answered there.
        @Test func aDroppedConnectionFailsOverToTheNextEndpoint() async throws {
            let first = try await FakeBroker.start()
            let second = try await FakeBroker.start()
            var configuration = SkyClient.Configuration()
            configuration.connectTimeout = .milliseconds(500)
            let sky = try await SkyClient(brokers: [first.endpoint, second.endpoint], configuration: configuration)
            let one = Task { try await sky.request(service: "svc", body: [1]) }
            first.echo(await first.nextRequest())
            #expect(try await one.value == [1])
            await first.stop()
            let droppedAt = ContinuousClock.now
            // Bounded, so that a client that never fails over fails the test in time.
            let two = Task {
                try await sky.request(service: "svc", body: [2], options: ScanOptions(timeout: .seconds(4)))
            }
            let answering = Task { second.echo(await second.nextRequest()) }
            #expect(try await two.value == [2])
            await answering.value
            let failover = ContinuousClock.now - droppedAt
            #expect(failover < .seconds(5), "answered by the second endpoint after \(failover)")
            #expect(await sky.statistics.endpoint == second.endpoint)
            await sky.close()
            await second.stop()
        }

        /// A batch of `total` echo tasks that counts what `scanAll` took: a task is made just
        /// before its call starts, so the count shows a call beyond a limit at once, without
        /// waiting for it to arrive.
        struct CountedBatch {
            let taken = Locked(0)
            let total: Int

            func run(on sky: SkyClient, concurrency: Int) -> AsyncStream<BatchResult<EchoTask>> {
                let taken = taken
                return sky.scanAll(count: total, concurrency: concurrency, options: ScanOptions(coalesce: false)) {
                    index in
                    taken.withLock { $0 += 1 }
                    return EchoTask(message: "\(index)")
                }
            }

            var takenSoFar: Int { taken.withLock { $0 } }
        }

        /// `scanAll` keeps at most `concurrency` calls in flight, and uses all of them.
        @Test func scanAllNeverHoldsMoreThanItsConcurrencyInFlight() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let batch = CountedBatch(total: 20)
            let concurrency = 3
            let stream = batch.run(on: sky, concurrency: concurrency)
            let collected = Task { await stream.reduce(into: 0) { count, _ in count += 1 } }
            var outstanding: [FakeBroker.Received] = []
            var answered = 0
            var most = 0
            while answered < batch.total {
                if answered + outstanding.count < batch.total && outstanding.count < concurrency {
                    outstanding.append(await broker.nextRequest())
                    most = max(most, outstanding.count)
                } else {
                    // A task is taken before its call starts: beyond the limit, one more would
                    // have been taken already.
                    #expect(batch.takenSoFar <= answered + concurrency, "a call beyond the limit started")
                    broker.echo(outstanding.removeFirst())
                    answered += 1
                }
                #expect(outstanding.count <= concurrency)
            }
            #expect(most == concurrency)
            #expect(await collected.value == batch.total)
            // Nothing else was sent.
            let snapshotCalls = await sky.statistics.counters.calls
            #expect(snapshotCalls == batch.total)
            await sky.close()
            await broker.stop()
        }

        /// A loop that reads a batch's outcomes slower than they come holds at most
        /// `concurrency` of them unread: then no task starts until it reads one. Before, tasks
        /// went on starting and every outcome waited in the stream (a lazy batch of millions
        /// behind a slow database insert held them all).
        @Test func scanAllStartsNoTaskWhileConcurrencyOutcomesWaitUnread() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let batch = CountedBatch(total: 30)
            let concurrency = 3
            let stream = batch.run(on: sky, concurrency: concurrency)
            // Nothing read: `concurrency` calls run and are answered, `concurrency` more start
            // while those outcomes wait, and are answered too.
            for _ in 0..<(2 * concurrency) { broker.echo(await broker.nextRequest()) }
            // Then no call starts. An absence can only be observed over a window: the next call
            // is awaited for 200 ms (a runaway batch sends it within a round trip).
            let early = await broker.nextRequest(within: .milliseconds(200))
            #expect(early == nil, "a call started with nothing read")
            #expect(batch.takenSoFar == 2 * concurrency)
            var results = stream.makeAsyncIterator()
            _ = await results.next()
            var read = 1
            // The read lets one call start.
            broker.echo(await broker.nextRequest())
            // From here every call is answered as it arrives, so only the reader holds the batch back.
            let answering = Task {
                for _ in 0..<(batch.total - 2 * concurrency - 1) { broker.echo(await broker.nextRequest()) }
            }
            while await results.next() != nil {
                read += 1
                // Each outcome read lets one more task start, and nothing else does.
                #expect(
                    batch.takenSoFar <= min(batch.total, 2 * concurrency + read),
                    "\(batch.takenSoFar) tasks taken with \(read) outcomes read")
            }
            await answering.value
            #expect(read == batch.total)
            await sky.close()
            await broker.stop()
        }
    }
}
