import Foundation
import SkyProtocol
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Synchronization
import Testing

@testable import Sky

extension IntegrationSuite {
    /// SkyClient against a scripted fake broker (a raw ROUTER in this process). Part of the
    /// serialized integration suite because these tests measure real time.
    @Suite("SkyClient against a fake broker")
    struct FakeBrokerClientTests {
        /// Measured runs of the backoff schedule: attempts wait 500 ms, then back off 250 ms × 2ⁿ.
        static let measured = ScanOptions(
            timeout: .milliseconds(500),
            retry: RetryPolicy(maxAttempts: 4, initialBackoff: .milliseconds(250), multiplier: 2, jitter: 0))

        /// On the real clock a timer never fires early, and fires late by the scheduler's delay:
        /// up to 300 ms is allowed for a loaded 2-core machine. `measured` counts from a time
        /// taken before the call was made, to one noted after the event (the fake broker notes
        /// an arrival when its reader task runs), so it can only look late, never early. The
        /// exact schedule is checked on a manual clock (``theBackoffScheduleIsExactOnAManualClock()``).
        static func onTime(_ measured: Duration, _ expected: Duration) -> Bool {
            measured >= expected && measured <= expected + .milliseconds(300)
        }

        @Test(arguments: [0, 2, 5])
        func aBrokerThatDropsTheFirstKRepliesSeesMinKRPlusOneAttemptsOnTheBackoffSchedule(dropped k: Int) async throws {
            let retries = Self.measured.retry.maxAttempts - 1
            let expectedAttempts = min(k, retries) + 1
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let started = ContinuousClock.now
            let call = Task { try await sky.request(service: "svc", body: [1, 2, 3], options: Self.measured) }
            var requests: [FakeBroker.Received] = []
            var cancels = 0
            while true {
                let message = await broker.next()
                guard let request = message.request else {
                    cancels += 1
                    continue
                }
                requests.append(message)
                #expect(request.header.attempt == UInt32(requests.count))
                // What is left of the attempt's 500 ms when it goes out (an attempt that waited
                // for the connection has less).
                #expect((400...500).contains(request.header.timeoutMilliseconds), "\(request.header)")
                if requests.count > k { broker.echo(message) }
                if requests.count == expectedAttempts { break }
            }
            let outcome = await call.result
            let elapsed = ContinuousClock.now - started
            let statistics = await sky.statistics
            #expect(statistics.attemptsSent == expectedAttempts, "exactly min(k, R) + 1 attempts")
            #expect(Set(requests.compactMap(\.request?.requestID)).count == 1, "one request id for every attempt")
            // Attempt n + 1 follows attempt n by its timeout plus the nth backoff. Never early:
            // counted from the call, it comes no sooner than every timeout and backoff before it
            // (a gap between two arrivals would look short when the first was noted late); and
            // each gap is at most the scheduler's delay longer than its nominal length.
            var nominal = Duration.zero
            for n in 1..<requests.count {
                let expected = Duration.milliseconds(500) + Self.measured.retry.nominalBackoff(afterAttempt: n)
                nominal += expected
                let arrived = requests[n].at - started
                let gap = requests[n].at - requests[n - 1].at
                #expect(arrived >= nominal, "attempt \(n + 1) came \(arrived) after the call, before \(nominal)")
                #expect(gap <= expected + .milliseconds(300), "gap \(n): \(gap), expected \(expected)")
            }
            if k <= retries {
                #expect(try outcome.get() == [1, 2, 3])
            } else {
                #expect(throws: SkyError.self) { try outcome.get() }
                guard case .failure(let error) = outcome, case .timeout? = error as? SkyError else {
                    Issue.record("expected a timeout, got \(outcome)")
                    return
                }
                let expected = (1...retries).reduce(Duration.milliseconds(500 * (retries + 1))) {
                    $0 + Self.measured.retry.nominalBackoff(afterAttempt: $1)
                }
                #expect(Self.onTime(elapsed, expected), "gave up after \(elapsed), expected \(expected)")
            }
            print("dropped \(k): \(requests.count) attempts, \(cancels) cancels, \(elapsed)")
            await sky.close()
            await broker.stop()
        }

        /// A broker that predates `events-endpoint` in `mmi.features` (this fake answers it
        /// `unknownService`, as such a broker does): the events are looked for where every
        /// broker before put them, the clients port + 2.
        @Test func aBrokerThatDoesNotSayItsEventsEndpointIsHeardAtItsPortPlusTwo() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let port = try #require(broker.endpoint.split(separator: ":").last.flatMap { Int($0) })
            #expect(await sky.toldEventsEndpoints() == nil)
            let subscription = try await sky.subscribeToEvents(buffered: 1)
            #expect(subscription.endpoint == "tcp://127.0.0.1:\(port + 2)")
            _ = subscription.close()
            await sky.close()
        }

        @Test func aTimeoutFiresNeverEarlyAndSoonAfterItsDeadlineOnTheRealClock() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let started = ContinuousClock.now
            let error = await #expect(throws: SkyError.self) {
                _ = try await sky.request(
                    service: "svc", body: [], options: ScanOptions(timeout: .milliseconds(800), retry: .never))
            }
            #expect(error?.code == .timeout, "\(String(describing: error))")
            let elapsed = ContinuousClock.now - started
            #expect(elapsed >= .milliseconds(800) && elapsed <= .milliseconds(1100), "\(elapsed)")
            print("800 ms timeout fired after \(elapsed)")
            await sky.close()
            await broker.stop()
        }

        /// A client on a manual clock, and the fake broker it talks to.
        static func onManualClock() async throws -> (ManualClock, FakeBroker, SkyClient) {
            let clock = ManualClock()
            var configuration = SkyClient.Configuration()
            configuration.clock = clock
            // Connecting takes real time; on a clock that stands still it never times out.
            configuration.connectTimeout = .seconds(3600)
            let broker = try await FakeBroker.start()
            return (clock, broker, try await SkyClient(broker: broker.endpoint, configuration: configuration))
        }

        /// Every attempt of a call whose replies never come: attempt n + 1 is sent exactly when
        /// attempt n's timeout plus the nth backoff have passed on the client's clock, not a
        /// millisecond before; then the call fails with `timeout`.
        @Test func theBackoffScheduleIsExactOnAManualClock() async throws {
            let (clock, broker, sky) = try await Self.onManualClock()
            let call = Task { try await sky.request(service: "svc", body: [1], options: Self.measured) }
            let attempts = Self.measured.retry.maxAttempts
            var ids = Set<RequestID>()
            for attempt in 1...attempts {
                // Bounded, so that a wrong schedule fails the test instead of hanging it.
                try await eventually("attempt \(attempt) sent") { broker.unread > 0 }
                let request = try #require(await broker.nextRequest().request)
                #expect(request.header.attempt == UInt32(attempt))
                ids.insert(request.requestID)
                var waits = [Self.measured.timeout!]
                if attempt < attempts { waits.append(Self.measured.retry.nominalBackoff(afterAttempt: attempt)) }
                for (index, wait) in waits.enumerated() {
                    await clock.waitForSleepers(1)
                    clock.advance(by: wait - .milliseconds(1))
                    try await eventually("the timer re-armed for the last millisecond") { clock.sleeperCount == 1 }
                    #expect(await sky.statistics.attemptsSent == attempt, "nothing sent a millisecond early")
                    clock.advance(by: .milliseconds(1))
                    if index == 0 && attempt < attempts {
                        // The timed-out attempt is cancelled at the broker before the backoff.
                        try await eventually("attempt \(attempt) cancelled") { broker.unread > 0 }
                        #expect(await broker.next().command == .cancel(request.requestID))
                    }
                }
            }
            let error = await #expect(throws: SkyError.self) { try await call.value }
            #expect(error?.code == .timeout, "\(String(describing: error))")
            #expect(ids.count == 1, "one request id for every attempt")
            #expect(await sky.statistics.attemptTimeouts == attempts)
            await sky.close()
            await broker.stop()
        }

        @Test func aTimeoutFiresExactlyAtItsDeadlineOnAManualClock() async throws {
            let (clock, broker, sky) = try await Self.onManualClock()
            let call = Task {
                try await sky.request(
                    service: "svc", body: [], options: ScanOptions(timeout: .seconds(10), retry: .never))
            }
            _ = await broker.nextRequest()
            await clock.waitForSleepers(1)
            clock.advance(by: .milliseconds(9_999))
            try await eventually("the timer re-armed for the last millisecond") { clock.sleeperCount == 1 }
            #expect(await sky.statistics.callsInFlight == 1)
            clock.advance(by: .milliseconds(1))
            let error = await #expect(throws: SkyError.self) { try await call.value }
            #expect(error?.code == .timeout, "\(String(describing: error))")
            #expect(await sky.statistics.attemptTimeouts == 1)
            await sky.close()
            await broker.stop()
        }

        /// docs/client.md promises: 100 concurrent calls all resume within 20 ms of being
        /// cancelled, one call under 1 ms (measured in a debug build: 8 ms and 0.1 ms idle, 11 ms
        /// with both cores taken by stress-ng). One run on a busy 2-core machine can be delayed
        /// by the scheduler, so the promise is checked on the median of several rounds, and
        /// the rounds are measured again (five times at most) while the median misses: with
        /// both integration lines and the documentation's build starting beside it, one median
        /// was 29 ms. A client that cannot keep the promise misses it every time.
        @Test func cancellingCallersThrowsAtOnceTellsTheBrokerAndLeaksNothing() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let hundredLimit: Duration = .milliseconds(20) * timingScale
            let oneLimit: Duration = .milliseconds(1) * timingScale
            var hundreds: [Duration] = []
            var ones: [Duration] = []
            for set in 0..<5 {
                var rounds: [Duration] = []
                for round in 0..<5 {
                    let calls = (0..<100).map { index in
                        Task { try await sky.request(service: "svc", body: [UInt8(set), UInt8(round), UInt8(index)]) }
                    }
                    for _ in calls { _ = await broker.nextRequest() }
                    let cancelledAt = ContinuousClock.now
                    for call in calls { call.cancel() }
                    for call in calls {
                        await #expect(throws: CancellationError.self) { _ = try await call.value }
                    }
                    let took: Duration = ContinuousClock.now - cancelledAt
                    rounds.append(took)
                    var cancelled = Set<RequestID>()
                    while cancelled.count < calls.count {
                        if case .cancel(let id) = await broker.next().command { cancelled.insert(id) }
                    }
                }
                var singles: [Duration] = []
                for index in 0..<21 {
                    let call = Task { try await sky.request(service: "svc", body: [0xff, UInt8(set), UInt8(index)]) }
                    _ = await broker.nextRequest()
                    let cancelledAt = ContinuousClock.now
                    call.cancel()
                    await #expect(throws: CancellationError.self) { _ = try await call.value }
                    let took: Duration = ContinuousClock.now - cancelledAt
                    singles.append(took)
                    _ = await broker.next()  // its CANCEL
                }
                hundreds.append(rounds.sorted()[rounds.count / 2])
                ones.append(singles.sorted()[singles.count / 2])
                if hundreds.min()! < hundredLimit && ones.min()! < oneLimit { break }
            }
            #expect(hundreds.min()! < hundredLimit, "100 cancellations: medians of 5 rounds \(hundreds)")
            #expect(ones.min()! < oneLimit, "one cancellation: medians of 21 \(ones)")
            let statistics = await sky.statistics
            #expect(statistics.suspendedCallers == 0, "no continuation left behind")
            #expect(statistics.callsInFlight == 0)
            print("cancellation: 100 calls in \(hundreds) (medians of 5), one call in \(ones) (medians of 21)")
            await sky.close()
            await broker.stop()
        }

        /// A call made by a task that is already cancelled throws at once and never reaches the
        /// broker: the caller's continuation is taken back before the call is posted to the I/O
        /// thread, so the machine never starts it.
        @Test(.timeLimit(.minutes(1)))  // before the fix the cancelled call hung
        func aCallFromACancelledTaskThrowsAtOnceAndIsNeverSent() async throws {
            let (broker, sky) = try await FakeBroker.startWithConnectedClient(first: [1])
            let cancelled = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await sky.request(service: "svc", body: [2])
            }
            await #expect(throws: CancellationError.self) { try await cancelled.value }
            // One more call: the I/O thread takes inputs in order, so once it is answered
            // anything the cancelled call had posted would have been taken too.
            let third = Task { try await sky.request(service: "svc", body: [3]) }
            let request = await broker.nextRequest()
            #expect(request.request?.body == [3], "the cancelled call's request never went out")
            broker.echo(request)
            #expect(try await third.value == [3])
            let statistics = await sky.statistics
            #expect(statistics.calls == 2 && statistics.attemptsSent == 2)
            #expect(statistics.suspendedCallers == 0)
            await sky.close()
            await broker.stop()
        }

        /// A broker that floods the client with garbage, replies for ids it never got and
        /// duplicates, while a call is in flight: the call gets its one answer, the others are
        /// counted, and the client goes on serving.
        @Test(.timeLimit(.minutes(1)))
        func aBrokerFloodingGarbageAndStrayRepliesDisturbsNoCall() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let call = Task { try await sky.request(service: "svc", body: [7]) }
            let received = await broker.nextRequest()
            let request = try #require(received.request)
            var noise: [[[UInt8]]] = []
            for index in 0..<20_000 {
                switch index % 4 {
                case 0: noise.append([Array("SKYC01".utf8), [0x02]])  // a REPLY without its frames
                case 1: noise.append([[UInt8](repeating: UInt8(index & 0xFF), count: index % 64)])
                case 2:
                    noise.append(
                        BrokerToClient.reply(
                            TaskReply(requestID: RequestID(high: 9, low: UInt64(index)), status: .ok, body: [1])
                        ).encode())
                default:
                    noise.append(
                        BrokerToClient.reply(
                            .failure(request.requestID, .handlerError, type: "x", message: "stale", attempt: 99)
                        ).encode())
                }
            }
            broker.sendRaw(to: received.peer, noise)
            broker.echo(received)
            broker.echo(received)  // and a duplicate of the real answer
            #expect(try await call.value == [7])
            // Still serving: the next call is answered too.
            let next = Task { try await sky.request(service: "svc", body: [8]) }
            broker.echo(await broker.nextRequest())
            #expect(try await next.value == [8])
            let statistics = await sky.statistics
            #expect(statistics.malformedMessages == 10_000, "\(statistics.counters)")
            #expect(statistics.staleReplies == 5_000, "failures naming an attempt never sent")
            #expect(statistics.unmatchedReplies == 5_001, "stray ids and the duplicate")
            #expect(statistics.suspendedCallers == 0 && statistics.callsInFlight == 0)
            await sky.close()
            await broker.stop()
        }

        /// An `async` call on a started client goes straight to the client's machine, as a
        /// completion's does; a name the protocol cannot carry is still refused before anything
        /// is sent, with the local check's reason, and the next call goes out.
        @Test(.timeLimit(.minutes(1)), arguments: ["", "bad\nname", String(repeating: "s", count: 256)])
        func anInvalidServiceNameIsRefusedOnAStartedClientWithoutBeingSent(service: String) async throws {
            let (broker, sky) = try await FakeBroker.startWithConnectedClient()
            let sentBefore = await sky.statistics.counters.attemptsSent
            let error = await #expect(throws: SkyError.self) { _ = try await sky.request(service: service, body: []) }
            guard case .invalidTask(let message)? = error else {
                Issue.record("expected invalidTask, got \(String(describing: error))")
                return
            }
            #expect(message.contains("is not 1...255 bytes of UTF-8 without control characters"), "\(message)")
            #expect(await sky.statistics.counters.attemptsSent == sentBefore)
            let next = Task { try await sky.request(service: "svc", body: [7]) }
            let received = await broker.nextRequest()
            #expect(received.request?.service == "svc", "the refused call was not sent: the next is the broker's next")
            broker.echo(received)
            #expect(try await next.value == [7])
            await sky.close()
            await broker.stop()
        }

        /// A call started from a completion (which runs on the I/O thread) goes into the
        /// machine and out to the broker in the wake-up that ran the completion, not through a
        /// marker in the loop's mailbox and another pass of the loop: a chain of 100 such calls
        /// posts no input, and each is answered once, in order.
        @Test(.timeLimit(.minutes(1)))
        func callsStartedFromCompletionsAreTakenInTheWakeUpThatRanThem() async throws {
            let (broker, sky) = try await FakeBroker.startWithConnectedClient()
            let started = sky.shell.loop.load()
            let loop = try #require(started)
            let postedBefore = loop.inputsPosted.load(ordering: .relaxed)
            let chain = 100
            let answers = Locked<[[UInt8]]>([])
            let (done, finish) = AsyncStream.makeStream(of: Void.self)
            @Sendable func call(_ number: Int) {
                sky.request(service: "svc", body: [UInt8(number)]) { result in
                    answers.withLock { $0.append((try? result.get()) ?? []) }
                    if number < chain { call(number + 1) } else { finish.yield() }
                }
            }
            // The first from the test's task (one marker), the rest from completions.
            call(1)
            for _ in 1...chain { broker.echo(await broker.nextRequest()) }
            for await _ in done { break }
            #expect(answers.withLock { $0 } == (1...chain).map { [UInt8($0)] })
            let posted = loop.inputsPosted.load(ordering: .relaxed) - postedBefore
            #expect(posted <= 1, "\(posted) inputs posted for \(chain) calls")
            #expect(await sky.statistics.suspendedCallers == 0)
            await sky.close()
            await broker.stop()
        }

        /// `close()` ends every call in flight with `clientClosed` (from the I/O thread, as the
        /// machine's last input), later calls too, and leaves no caller suspended.
        @Test(.timeLimit(.minutes(1)))
        func closingFailsTheCallsInFlightAndLaterOnesWithClientClosed() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let calls = (0..<3).map { index in Task { try await sky.request(service: "svc", body: [UInt8(index)]) } }
            for _ in calls { _ = await broker.nextRequest() }
            await sky.close()
            for call in calls {
                await ClientPromiseTests.expectError(.clientClosed) { _ = try await call.value }
            }
            await ClientPromiseTests.expectError(.clientClosed) { _ = try await sky.request(service: "svc", body: [9]) }
            #expect(await sky.statistics.suspendedCallers == 0)
            await broker.stop()
        }

        @Test func lateAndDuplicateRepliesAreDiscardedAndCounted() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let call = Task { try await sky.request(service: "svc", body: [5]) }
            let message = await broker.nextRequest()
            broker.echo(message)
            broker.echo(message)
            broker.reply(to: message.peer, TaskReply(requestID: .random(), status: .ok, body: []))
            #expect(try await call.value == [5])
            try await eventually("both extra replies arrived") { await sky.unmatchedReplies == 2 }
            await sky.close()
            await broker.stop()
        }

        @Test func concurrentFirstCallersShareOneConnection() async throws {
            let broker = try await FakeBroker.start()
            let sky = try await SkyClient(broker: broker.endpoint)
            let calls = (0..<50).map { index in Task { try await sky.request(service: "svc", body: [UInt8(index)]) } }
            var peers = Set<[UInt8]>()
            for _ in calls {
                let message = await broker.nextRequest()
                peers.insert(message.peer)
                broker.echo(message)
            }
            for (index, call) in calls.enumerated() { #expect(try await call.value == [UInt8(index)]) }
            #expect(peers.count == 1)
            // The routing id is the same on every connection; the accepted connections tell.
            #expect(broker.acceptedConnections == 1)
            await sky.close()
            await broker.stop()
        }

        @Test func aLostConnectionIsRemadeAndTheCallInFlightSentAgain() async throws {
            let first = try await FakeBroker.start()
            let endpoint = first.endpoint
            let sky = try await SkyClient(broker: endpoint)
            let call = Task { try await sky.request(service: "svc", body: [8]) }
            let original = await first.nextRequest()
            await first.stop()  // the broker dies holding the request
            let second = try await FakeBroker.start(on: endpoint)
            let resent = await second.nextRequest()
            #expect(resent.request?.header.attempt == 2)
            #expect(resent.peer == original.peer, "the client keeps its routing id across connections")
            #expect(resent.peer.count == 16)
            second.echo(resent)
            #expect(try await call.value == [8])
            let statistics = await sky.statistics
            #expect(statistics.resentAfterReconnect == 1 && statistics.retries == 0)
            await sky.close()
            await second.stop()
        }

        @Test func anUnreachableEndpointIsLeftForTheNextInTheList() async throws {
            let dead = try await unusedEndpoint()
            let broker = try await FakeBroker.start()
            var configuration = SkyClient.Configuration()
            configuration.connectTimeout = .milliseconds(300)
            let sky = try await SkyClient(brokers: [dead, broker.endpoint], configuration: configuration)
            let call = Task { try await sky.request(service: "svc", body: [4]) }
            broker.echo(await broker.nextRequest())
            #expect(try await call.value == [4])
            #expect(await sky.statistics.endpoint == broker.endpoint)
            await sky.close()
            await broker.stop()
        }

        @Test func withoutABrokerAClientWithALocalSystemRunsItsScansLocally() async throws {
            let system = ScanSystem(name: "local", capacity: 2)
            try await BuiltInWorkloads.register(BuiltInWorkloads.all, on: system)
            var configuration = SkyClient.Configuration()
            configuration.localFallback = system
            configuration.localFallbackWait = .milliseconds(200)
            configuration.connectTimeout = .milliseconds(500)
            let sky = try await SkyClient(broker: try await unusedEndpoint(), configuration: configuration)
            let started = ContinuousClock.now
            for sector in 0..<20 {
                let task = ScanTask(sector: sector, size: 32)
                #expect(try await sky.scan(task) == SectorScanner.scan(task))
            }
            let elapsed = ContinuousClock.now - started
            #expect(await sky.statistics.localRuns == 20)
            // 20 calls that each waited the connection's 200 ms would take 4 s at least.
            #expect(elapsed < .seconds(2), "only the first call waits for a connection: \(elapsed)")
            // A service the local system does not have still reports the broker as unreachable.
            let error = await #expect(throws: SkyError.self) {
                _ = try await sky.request(
                    service: "elsewhere", body: [],
                    options: ScanOptions(timeout: .seconds(5), retry: .never))
            }
            #expect(error?.code == .brokerUnreachable, "\(String(describing: error))")
            await sky.close()
        }

        /// A client whose first call needs the broker's features (a submit with
        /// `confirmWithin`, the default) connects to ask them, and sends the submit in the form
        /// the answer names. It once found no connection, took "nothing known" at once, and sent
        /// version 1: a fresh process's first submit against a hung store waited the store's
        /// bound, not its own.
        @Test func aFreshClientsFirstSubmitWaitsForTheFeaturesAndSendsVersionTwo() async throws {
            let broker = try await FakeBroker.start(reportsFeatures: true)
            defer { Task { await broker.stop() } }
            let sky = try await SkyClient(broker: broker.endpoint)
            defer { Task { await sky.close() } }
            let submit = Task { try await sky.submit(EchoTask(message: "first")) }
            let ask = await broker.nextRequest()
            let question = try #require(ask.request)
            #expect(question.service == BrokerService.features)
            broker.reply(
                to: ask.peer,
                TaskReply(
                    requestID: question.requestID, status: .ok,
                    body: BrokerFeatures.broker(maxFrameSize: 65536).encode()))
            let sent = try #require(await broker.nextRequest(within: .seconds(5))?.request)
            #expect(sent.service == BrokerService.jobSubmit)
            #expect(
                sent.body.first == JobSubmission.confirmingVersion,
                "the submit went as version \(sent.body.first as Any)")
            submit.cancel()
        }
    }
}
