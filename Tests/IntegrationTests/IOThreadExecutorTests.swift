import Foundation
import Logging
import Sky
import SkyProtocol
import SkyTasks
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// Handlers on the worker's I/O thread (`SkyWorker.Configuration.handlerExecutor`) and
    /// callers on the client's (`SkyClient.ioThreadExecutor`): the opt-in placements that save
    /// a task its thread wake-ups, with the real broker between them.
    @Suite("Handlers and callers on the I/O threads")
    struct IOThreadExecutorTests {
        struct Refusal: Error, CustomStringConvertible {
            let reason: String
            var description: String { reason }
        }

        static func startWorker(
            _ system: ScanSystem, cluster: TestCluster, handlers: HandlerExecutor
        ) -> Task<Void, any Error> {
            let worker = SkyWorker(
                configuration: .init(broker: cluster.workers, handlerExecutor: handlers), system: system,
                logger: Logger(label: "io-thread-test"))
            return Task { try await worker.run() }
        }

        /// A system whose `hold` handler says "started", waits until it is cancelled and says
        /// "cancelled on THREAD"; and `echo`.
        static func holdingSystem() async -> (ScanSystem, AsyncStream<String>) {
            let (events, event) = AsyncStream.makeStream(of: String.self)
            let system = ScanSystem(name: "holding", capacity: 4)
            await system.registerRaw(service: "hold") { _ in
                event.yield("started")
                do {
                    try await untilCancelled()
                } catch {
                    event.yield("cancelled on \(currentThreadName())")
                    throw error
                }
            }
            await system.registerRaw(service: "echo") { $0 }
            return (system, events)
        }

        @Test(arguments: HandlerExecutor.allCases)
        func handlersRunWhereTheWorkerIsConfiguredToRunThem(_ handlers: HandlerExecutor) async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let system = ScanSystem(name: "placed", capacity: 16)
            await system.registerRaw(service: "where") { body in body + Array(currentThreadName().utf8) }
            let running = Self.startWorker(system, cluster: cluster, handlers: handlers)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let replies = try await withThrowingTaskGroup(of: String.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        let prefix = Array("\(index):".utf8)
                        let reply = try await sky.request(service: "where", body: prefix)
                        #expect(reply.starts(with: prefix))
                        return String(decoding: reply.dropFirst(prefix.count), as: UTF8.self)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.count == 64)
            switch handlers {
            case .ioThread: #expect(replies.allSatisfy { $0 == "skyworker-io" }, "\(Set(replies))")
            case .pool: #expect(replies.allSatisfy { $0 != "skyworker-io" }, "\(Set(replies))")
            }
            await sky.close()
        }

        /// Handlers registered inline run on the worker's I/O thread whatever the placement of
        /// the others, beside them in one worker: 1,024 calls each answered once with its own
        /// body; a typed one decodes, a bad payload is `invalidPayload`, a throw arrives with
        /// its type; run locally (the client's fallback) an inline handler answers too.
        @Test func inlineHandlersRunOnTheIOThreadBesideTheOthers() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let system = ScanSystem(name: "inline", capacity: 16)
            await system.registerRawInline(service: "where") { body in body + Array(currentThreadName().utf8) }
            await system.registerRaw(service: "pooled") { body in body + Array(currentThreadName().utf8) }
            await system.registerInline(EchoTask.self) { task in EchoTask(message: task.message + "!") }
            await system.registerRawInline(service: "refuses") { _ in throw Refusal(reason: "not inline today") }
            let running = Self.startWorker(system, cluster: cluster, handlers: .pool)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let replies = try await withThrowingTaskGroup(of: (String, String).self) { group in
                for index in 0..<1024 {
                    group.addTask {
                        let prefix = Array("\(index):".utf8)
                        let service = index % 4 == 0 ? "pooled" : "where"
                        let reply = try await sky.request(service: service, body: prefix)
                        #expect(reply.starts(with: prefix))
                        return (service, String(decoding: reply.dropFirst(prefix.count), as: UTF8.self))
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(replies.count == 1024)
            let inline = Set(replies.filter { $0.0 == "where" }.map(\.1))
            let pooled = Set(replies.filter { $0.0 == "pooled" }.map(\.1))
            #expect(inline == ["skyworker-io"], "\(inline)")
            #expect(!pooled.contains("skyworker-io"), "\(pooled)")
            #expect(try await sky.scan(EchoTask(message: "hi")) == EchoTask(message: "hi!"))
            let bad = await #expect(throws: SkyError.self) {
                _ = try await sky.request(service: EchoTask.service, body: Array("{".utf8))
            }
            #expect(bad?.code == .invalidPayload, "\(String(describing: bad))")
            let thrown = await #expect(throws: SkyError.self) {
                _ = try await sky.request(service: "refuses", body: [], options: ScanOptions(retry: .never))
            }
            guard case .remote(let type, let message) = thrown else {
                Issue.record("an inline handler's throw came back as \(String(describing: thrown))")
                return
            }
            #expect(type.hasSuffix("Refusal") && message == "not inline today", "\(type): \(message)")
            let local = await system.execute(
                TaskRequest(requestID: RequestID(high: 1, low: 2), service: "where", body: [7]))
            #expect(local.status == .ok && local.body.first == 7)
            await sky.close()
        }

        /// A handler that awaits on the I/O thread leaves the thread free: other tasks are answered
        /// meanwhile, and the caller's cancellation reaches the waiting handler.
        @Test func aHandlerAwaitingOnTheIOThreadLeavesItFreeAndIsCancelledWithItsCaller() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let (system, events) = await Self.holdingSystem()
            let running = Self.startWorker(system, cluster: cluster, handlers: .ioThread)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            var seen = events.makeAsyncIterator()
            let held = Task { try await sky.request(service: "hold", body: []) }
            #expect(await seen.next() == "started")
            #expect(try await sky.request(service: "echo", body: [7]) == [7])
            held.cancel()
            #expect(await seen.next() == "cancelled on skyworker-io")
            await #expect(throws: CancellationError.self) { try await held.value }
            #expect(try await sky.request(service: "echo", body: [8]) == [8])
            await sky.close()
        }

        /// The callback API: the client's first call (which starts it) is answered; then 64
        /// chains of 16 calls, each started from the last one's completion, are each answered
        /// once, on the I/O thread; a typed call's result is decoded and a handler's failure
        /// arrives typed; a call refused at once completes before `request` returns; after
        /// `close()` a call is told so.
        @Test func completionHandlersRunOnTheIOThreadAndCallsStartedFromThemAreAnswered() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let system = ScanSystem(name: "echoing", capacity: 16)
            await system.registerRaw(service: "echo") { $0 }
            await system.registerRaw(service: "fails") { _ in throw Refusal(reason: "no thanks") }
            await system.register(EchoTask.self) { task in task }
            let running = Self.startWorker(system, cluster: cluster, handlers: .pool)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let first = await withCheckedContinuation { done in
                sky.request(service: "echo", body: [1]) { done.resume(returning: $0) }
            }
            #expect(try first.get() == [1])

            let seen = Locked((threads: Set<String>(), answered: 0, wrong: [String]()))
            let chains = 64
            let calls = 16
            await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                let running = Locked(chains)
                @Sendable func call(_ chain: Int, _ number: Int) {
                    let body = Array("\(chain).\(number)".utf8)
                    sky.request(service: "echo", body: body) { result in
                        seen.withLock { seen in
                            seen.threads.insert(currentThreadName())
                            if case .success(let reply) = result, reply == body {
                                seen.answered += 1
                            } else {
                                seen.wrong.append("\(chain).\(number): \(result)")
                            }
                        }
                        if number + 1 < calls {
                            call(chain, number + 1)
                        } else if running.withLock({ running in
                            running -= 1
                            return running == 0
                        }) {
                            finished.resume()
                        }
                    }
                }
                for chain in 0..<chains { call(chain, 0) }
            }
            let (threads, answered, wrong) = seen.withLock { ($0.threads, $0.answered, $0.wrong) }
            #expect(answered == chains * calls && wrong.isEmpty, "\(answered) answered; \(wrong.prefix(3))")
            #expect(threads == ["skyclient-io"], "\(threads)")

            let typed = await withCheckedContinuation { done in
                sky.scan(EchoTask(message: "typed")) { done.resume(returning: $0) }
            }
            #expect(try typed.get() == EchoTask(message: "typed"))
            let failed = await withCheckedContinuation { done in
                sky.request(service: "fails", body: [], options: ScanOptions(retry: .never)) {
                    done.resume(returning: $0)
                }
            }
            guard case .failure(.remote(let type, let message)) = failed else {
                Issue.record("a handler's failure came back as \(failed)")
                return
            }
            #expect(type.hasSuffix("Refusal") && message.contains("no thanks"), "\(type): \(message)")

            // Refused at once, and retried from its completion a thousand times: the completion
            // never runs inside `request`, so the retries do not recurse on one stack (1 at
            // most: a completion on another thread may run before `request`'s caller left it).
            let refused = await Self.retriedFromCompletions(sky, service: "") { $0 == .invalidTask }
            #expect(refused.deepest <= 1 && refused.failures == 1000, "\(refused)")

            await sky.close()
            let afterClose = await withCheckedContinuation { done in
                sky.request(service: "echo", body: [1]) { done.resume(returning: $0) }
            }
            guard case .failure(.clientClosed) = afterClose else {
                Issue.record("a call after close() came back as \(afterClose)")
                return
            }
            // The same after the close: a chain that retries does not overflow the stack.
            let closed = await Self.retriedFromCompletions(sky, service: "echo") { $0 == .clientClosed }
            #expect(closed.deepest <= 1 && closed.failures == 1000, "\(closed)")
        }

        /// Calls `service` from each failed call's completion until 1,000 failed with
        /// `expected`: the deepest nesting of completions inside `request`, and the failures.
        static func retriedFromCompletions(
            _ sky: SkyClient, service: String, expected: @escaping @Sendable (SkyError.Code) -> Bool
        ) async -> (deepest: Int, failures: Int) {
            await withCheckedContinuation { (done: CheckedContinuation<(deepest: Int, failures: Int), Never>) in
                let seen = Locked((depth: 0, deepest: 0, failures: 0))
                @Sendable func call() {
                    seen.withLock { $0.depth += 1 }
                    sky.request(service: service, body: []) { result in
                        let (deepest, failures) = seen.withLock { seen in
                            seen.deepest = max(seen.deepest, seen.depth)
                            if case .failure(let error) = result, expected(error.code) { seen.failures += 1 }
                            return (seen.deepest, seen.failures)
                        }
                        if failures < 1000 { call() } else { done.resume(returning: (deepest, failures)) }
                    }
                    seen.withLock { $0.depth -= 1 }
                }
                call()
            }
        }

        /// A callback call's handle cancels it: the completion runs once with `cancelled`, the
        /// handler on the worker is cancelled, and a cancel after the outcome does nothing.
        /// The client's first call (which goes through a task) is cancelled the same way.
        @Test(.timeLimit(.minutes(1))) func aCallbackCallsHandleCancelsItOnceAndTheHandlerWithIt() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let (system, events) = await Self.holdingSystem()
            let running = Self.startWorker(system, cluster: cluster, handlers: .pool)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            var seen = events.makeAsyncIterator()
            let outcomes = Locked([String: [Result<[UInt8], SkyError>]]())
            let (ended, end) = AsyncStream.makeStream(of: String.self)
            @Sendable func record(_ name: String) -> @Sendable (Result<[UInt8], SkyError>) -> Void {
                { result in
                    outcomes.withLock { $0[name, default: []].append(result) }
                    end.yield(name)
                }
            }
            var endings = ended.makeAsyncIterator()
            // The client's first call: through a task, whose cancellation ends it.
            let first = sky.request(service: "hold", body: [], completion: record("first"))
            #expect(await seen.next() == "started")
            first.cancel()
            #expect(await endings.next() == "first")
            #expect(await seen.next()?.hasPrefix("cancelled") == true)
            // A call in the machine, by its waiter.
            let held = sky.request(service: "hold", body: [], completion: record("held"))
            #expect(await seen.next() == "started")
            held.cancel()
            held.cancel()
            #expect(await endings.next() == "held")
            #expect(await seen.next()?.hasPrefix("cancelled") == true)
            // Answered first: the cancel after it does nothing.
            let echoed = sky.request(service: "echo", body: [5], completion: record("echoed"))
            #expect(await endings.next() == "echoed")
            echoed.cancel()
            #expect(try await sky.request(service: "echo", body: [6]) == [6])
            let all = outcomes.withLock { $0 }
            for name in ["first", "held"] {
                guard let results = all[name], results.count == 1, case .failure(.cancelled) = results[0] else {
                    Issue.record("\(name): \(String(describing: all[name]))")
                    continue
                }
            }
            #expect(all["echoed"].map { $0.count == 1 && (try? $0[0].get()) == [5] } == true, "\(all)")
            await sky.close()
        }

        /// `close()` cancels the calls it ends at the broker: the handlers running them are
        /// cancelled at once (not at the broker's lease, 35 s on), and another client's call is
        /// served.
        @Test(.timeLimit(.minutes(1))) func closingAClientCancelsItsCallsAtTheBroker() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let (system, events) = await Self.holdingSystem()
            let running = Self.startWorker(system, cluster: cluster, handlers: .pool)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            var seen = events.makeAsyncIterator()
            // Four calls for the system's four slots, and two more that wait at the broker;
            // async callers and a callback alike.
            // (Bodies of their own: equal calls would share one request.)
            let callers = (0..<5).map { index in Task { try await sky.request(service: "hold", body: [UInt8(index)]) } }
            let ended = Locked(0)
            sky.request(service: "hold", body: [9]) { _ in ended.withLock { $0 += 1 } }
            for _ in 0..<4 { #expect(await seen.next() == "started") }
            let closed = ContinuousClock.now
            await sky.close()
            // A call that waited may still start before its cancel reaches the broker (a running
            // call's cancel freed a slot first, on a loaded machine): it is cancelled as well.
            var held = 4
            while held > 0, let event = await seen.next() {
                if event == "started" {
                    held += 1
                } else {
                    #expect(event.hasPrefix("cancelled"), "\(event)")
                    held -= 1
                }
            }
            #expect(held == 0)
            #expect(
                ContinuousClock.now - closed < .seconds(5),
                "the handlers were cancelled \(ContinuousClock.now - closed) after the close")
            for caller in callers {
                await #expect(throws: SkyError.clientClosed) { try await caller.value }
            }
            let other = try await SkyClient(broker: cluster.clients)
            #expect(try await other.request(service: "echo", body: [3]) == [3])
            await other.close()
            #expect(ended.withLock { $0 } == 1)
        }

        /// Callers that prefer the client's I/O thread are resumed there and every call is
        /// answered; the first calls are made before the client ever connected (its executor
        /// then runs them elsewhere until its loop exists); a caller on the thread may close the
        /// client; after `close()` such a caller is told so instead of waiting for a thread that
        /// has stopped.
        @Test func callersOnTheClientsIOThreadAreResumedThereAndEveryCallIsAnswered() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let system = ScanSystem(name: "echoing", capacity: 16)
            await system.registerRaw(service: "echo") { $0 }
            let running = Self.startWorker(system, cluster: cluster, handlers: .pool)
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            let names = try await withTaskExecutorPreference(sky.ioThreadExecutor) {
                try await withThrowingTaskGroup(of: [String].self) { group in
                    for caller in 0..<256 {
                        group.addTask {
                            var names: [String] = []
                            for call in 0..<4 {
                                let body = Array("\(caller).\(call)".utf8)
                                let reply = try await sky.request(service: "echo", body: body)
                                #expect(reply == body)
                                names.append(currentThreadName())
                            }
                            return names
                        }
                    }
                    return try await group.reduce(into: []) { $0 += $1 }
                }
            }
            #expect(names.count == 1024)
            #expect(names.allSatisfy { $0 == "skyclient-io" }, "\(Set(names))")

            // Closed from a caller on the thread that stops: the caller is resumed elsewhere.
            let closedOn = await withTaskExecutorPreference(sky.ioThreadExecutor) {
                await sky.close()
                return currentThreadName()
            }
            #expect(closedOn != "skyclient-io")
            let afterClose = await withTaskExecutorPreference(sky.ioThreadExecutor) { () async -> (any Error)? in
                do {
                    _ = try await sky.request(service: "echo", body: [1])
                    return nil
                } catch {
                    return error
                }
            }
            #expect(afterClose as? SkyError == .clientClosed, "\(String(describing: afterClose))")
        }
    }
}
