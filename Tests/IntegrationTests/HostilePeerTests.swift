import Foundation
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

@testable import Sky

extension IntegrationSuite {
    /// The ways an adversarial run made Sky lose replies, stall or refuse work (issue 13), each
    /// with real processes: a real broker, real or raw workers, raw and real clients.
    @Suite("Exactly one answer under hostile and careless peers")
    struct HostilePeerTests {
        /// A worker written from docs/protocol.md that answers with what JSON readers must
        /// survive: a result that is not JSON, a failure whose error body is 300 arrays deep and
        /// not UTF-8 (the broker reads failure bodies for its stats), and a reply whose tag has
        /// one byte more than the broker's (a tag the broker never gave). Each typed call gets
        /// exactly one answer, the first two at once, and the broker keeps serving.
        @Test func hostileJSONAndTagsFromAWorkerLeaveEveryCallOneAnswer() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let deep = Array(repeating: UInt8(ascii: "["), count: 300) + [0xFF, 0xFE]
            let worker = try await HungWorker(broker: cluster.workers, services: [Probe.service]) { tag, request in
                let reply = { (status: ReplyStatus, body: [UInt8]) in
                    TaskReply(requestID: request.requestID, status: status, body: body)
                }
                switch String(decoding: request.body, as: UTF8.self) {
                case #"{"message":"not json"}"#: return .reply(tag: tag, reply(.ok, Array(#"{"message":"#.utf8)))
                case #"{"message":"deep failure"}"#: return .reply(tag: tag, reply(.handlerError, deep))
                default: return .reply(tag: DeliveryTag(tag.bytes.array + [0]), reply(.ok, request.body))
                }
            }
            defer { Task { await worker.close() } }
            try await cluster.waitForWorkers(1)
            let sky = try await SkyClient(broker: cluster.clients)
            let options = ScanOptions(timeout: .milliseconds(500), retry: .never)
            let outcomes = try await withThrowingTaskGroup(of: (String, SkyError.Code?).self) { group in
                for message in ["not json", "deep failure", "wrong tag"] {
                    group.addTask {
                        do {
                            _ = try await sky.scan(Probe(message: message), options: options)
                            return (message, nil)
                        } catch let error as SkyError {
                            return (message, error.code)
                        }
                    }
                }
                return try await group.reduce(into: [String: SkyError.Code?]()) { $0[$1.0] = $1.1 }
            }
            #expect(outcomes.count == 3)
            #expect(outcomes["not json"] == .invalidResult)
            #expect(outcomes["deep failure"] == .remote)
            #expect(outcomes["wrong tag"] == .timeout)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.staleReplies >= 1, "the wrong tag names no delivery")
            #expect(snapshot.workers.map(\.name) == ["hung"])
            await sky.close()
            await cluster.stop()
        }

        /// After a raw peer sent `malformed` bad messages among valid ones: the broker counted
        /// each bad one, answered only the `answered` valid ones, and serves a client still; then
        /// the cluster stops.
        static func malformedCountedAndServing(
            _ cluster: TestCluster, peer: RawPeer, before: UInt64, malformed: Int, answered: Int
        ) async throws {
            try await eventually("the malformed ones counted") {
                try await cluster.snapshot().counters.malformedClientMessages == before + UInt64(malformed)
            }
            #expect(peer.replies.count == answered, "nothing answered the malformed ones")
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.scan(EchoTask(message: "still serving")).message == "still serving")
            await sky.close()
            await cluster.stop()
        }

        static func request(_ id: RequestID, _ service: String, body: [UInt8] = [1], timeout: UInt32 = 0) -> [[UInt8]] {
            ClientToBroker.request(
                TaskRequest(
                    requestID: id, service: service, header: RequestHeader(attempt: 1, timeoutMilliseconds: timeout),
                    body: body)
            ).encode()
        }

        /// Item 1: one worker hangs but heartbeats, one is healthy. The call's first attempt goes
        /// to the hung one, times out, is cancelled and retried: the healthy worker answers it,
        /// and the hung worker's late reply never reaches the client.
        @Test func aRetryAfterAHungAttemptIsAnsweredByTheHealthyWorker() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let hung = try await HungWorker(broker: cluster.workers, services: ["sky.echo"])
            defer { Task { await hung.close() } }
            try await cluster.waitForWorkers(1)
            _ = try await cluster.startWorker(name: "healthy", capacity: 4)
            try await cluster.waitForWorkers(2)

            let sky = try await SkyClient(broker: cluster.clients)
            let options = ScanOptions(timeout: .seconds(1), retry: RetryPolicy(maxAttempts: 3), coalesce: false)
            let started = ContinuousClock.now
            let result = try await sky.request(service: "sky.echo", body: [4, 5, 6], options: options)
            let elapsed = ContinuousClock.now - started
            #expect(result == [4, 5, 6])
            #expect(hung.requests.count == 1, "the first attempt went to the hung worker")
            #expect(elapsed < .seconds(3), "answered by the retry, not after every attempt: \(elapsed)")
            print("retry after a hung attempt answered in \(elapsed)")

            hung.answerAll()
            try await eventually("the hung worker's late reply is counted") {
                (try? await cluster.snapshot().counters.repliesAfterCancel) == 1
            }
            #expect(await sky.unmatchedReplies == 0, "the late reply must not reach the client")
            #expect(await sky.statistics.retries == 1)
            await sky.close()
        }

        /// Item 2: two clients using the same request id are two requests, and one client's
        /// CANCEL cannot touch the other's request, waiting or running.
        @Test func requestIDsBelongToTheirClient() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let hung = try await HungWorker(broker: cluster.workers, services: ["hold"], capacity: 1)
            defer { Task { await hung.close() } }
            _ = try await cluster.startWorker(name: "echo", capacity: 2)
            try await cluster.waitForWorkers(2)
            let a = try await RawPeer(connectingTo: cluster.clients, identity: Array("client-A".utf8))
            let b = try await RawPeer(connectingTo: cluster.clients, identity: Array("client-B".utf8))
            defer {
                Task {
                    await a.close(); await b.close()
                }
            }

            let shared = RequestID(high: 7, low: 7)
            a.send(Self.request(shared, "sky.echo", body: [0xA]))
            b.send(Self.request(shared, "sky.echo", body: [0xB]))
            #expect(try await a.waitForReplies(1).map(\.body) == [[0xA]])
            #expect(try await b.waitForReplies(1).map(\.body) == [[0xB]])

            let running = RequestID(high: 8, low: 1)
            let waiting = RequestID(high: 8, low: 2)
            a.send(Self.request(running, "hold"))
            try await eventually("the hung worker holds A's request") { hung.requests.count == 1 }
            a.send(Self.request(waiting, "hold"))
            b.send(ClientToBroker.cancel(running).encode())
            b.send(ClientToBroker.cancel(waiting).encode())
            try await eventually("both requests are still A's") {
                let snapshot = try await cluster.snapshot()
                return snapshot.totalQueued == 1 && snapshot.inFlight == 1
            }
            hung.answerAll()
            try await eventually("the waiting request reaches the worker") { hung.requests.count == 2 }
            hung.answerAll()
            let answers = try await a.waitForReplies(3)
            #expect(Set(answers.dropFirst().map(\.requestID)) == [running, waiting])
            #expect(answers.allSatisfy { $0.status == .ok })
            #expect(b.replies.count == 1, "B's CANCELs matched nothing of its own and got no answer")
            #expect(!hung.peer.workerCommands.contains { if case .cancel = $0 { true } else { false } })
        }

        /// Item 3: 100,000 queued requests whose deadlines pass together. The broker answers
        /// every one, keeps heartbeating (no worker is expired), and its longest loop iteration
        /// (published in broker.stats) stays under 100 ms in every second but one, and under
        /// 400 ms in that one: on a loaded machine the scheduler may preempt the thread in the
        /// middle of an iteration once (120 ms was seen beside two compilers and the suite), while
        /// the storm answered in one iteration would take seconds in a debug build.
        @Test func aDeadlineStormDoesNotStallTheBroker() async throws {
            let cluster = try await TestCluster.start(extraArguments: [
                "--queue-limit", "200000", "--client-queue-share", "1",
            ])
            defer { cluster.killAll() }
            let hung = try await HungWorker(broker: cluster.workers, services: ["storm"], capacity: 1)
            defer { Task { await hung.close() } }
            try await cluster.waitForWorkers(1)
            let watcher = try await cluster.watcher()
            let longest = Locked(0.0)
            let periods = Locked(0)
            let seen = Locked<[Double]>([])
            let stats = Task {
                for try await change in watcher.events() {
                    if case .event(let event) = change, let milliseconds = event.stats?.longestIterationMilliseconds {
                        longest.withLock { $0 = max($0, milliseconds) }
                        periods.withLock { $0 += 1 }
                        seen.withLock { $0.append(milliseconds) }
                    }
                }
            }
            defer { stats.cancel() }

            let flood = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await flood.close() } }
            flood.send(Self.request(RequestID(high: 0, low: 0), "storm"))  // occupies the worker
            // A tenth under ThreadSanitizer, whose slowdown would not queue 100,000 in time.
            let count = Int(100_000 / timingScale)
            let sending = ContinuousClock.now
            for start in stride(from: 0, to: count, by: 10_000) {
                flood.send(
                    (start..<min(start + 10_000, count)).map {
                        Self.request(RequestID(high: 1, low: UInt64($0)), "storm", timeout: 15_000)
                    })
            }
            // Queued before the first deadline passes: 4.5 s here on an idle machine, over 8 s
            // beside a CPU hog and a build.
            try await eventually("every request queued", timeout: Duration.seconds(13).scaled) {
                (try? await cluster.snapshot().totalQueued) == count
            }
            print("deadline storm: \(count) requests queued in \(ContinuousClock.now - sending)")
            // The stats period in which the last requests arrived measures reading them (up to
            // 1,024 per iteration); the storm is measured from the next full period on.
            let queuedAt = periods.withLock { $0 }
            try await eventually("a full stats period after queuing") { periods.withLock { $0 } >= queuedAt + 2 }
            longest.withLock { $0 = 0 }
            let answers = try await flood.waitForReplies(count, timeout: .seconds(60))
            #expect(answers.allSatisfy { $0.status == .deadlineExceeded })
            // The next full stats period, to cover the last slices.
            let answeredAt = periods.withLock { $0 }
            try await eventually("a full stats period after the answers") {
                periods.withLock { $0 } >= answeredAt + 2
            }
            let snapshot = try await cluster.snapshot()
            let worst = longest.withLock { $0 }
            print("deadline storm: longest iteration per second: \(seen.withLock { $0.map { Int($0) } })")
            print(
                "deadline storm: \(count) expiries answered; longest broker loop iteration \(worst) ms; workers expired \(snapshot.counters.workersExpired)"
            )
            #expect(snapshot.counters.workersExpired == 0)
            #expect(snapshot.workers.count == 1)
            #expect(snapshot.counters.deadlinesExceeded == UInt64(count))
            let slow = seen.withLock { $0.filter { $0 >= 100 * timingScale } }
            #expect(worst > 0 && worst < 400 * timingScale && slow.count <= 1, "\(slow)")
            await watcher.close()
        }

        /// Item 4: a raw XSUB that subscribes over and over gets a few greetings a second, not
        /// one per subscription; a watcher that subscribes meanwhile is still greeted.
        @Test func subscriptionChurnIsCoalesced() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let churn = ZMQEventLoop.SocketID(0, name: "churn")
            let loop = try await ZMQEventLoop.start(
                name: "churn", sockets: [.init(id: churn, type: .xsub, connect: [cluster.events])])
            defer { Task { await loop.shutdown() } }
            let hellos = Task {
                var count = 0
                for await batch in loop.inbound {
                    for case .message(_, let message) in batch where message.frames.first == Array("broker.hello".utf8)
                    {
                        count += 1
                    }
                }
                return count
            }
            let started = ContinuousClock.now
            var sent = 0
            while ContinuousClock.now - started < .seconds(2) {
                loop.send((0..<200).map { _ in .init(socket: churn, frames: [[0x01] + Array("broker.hello".utf8)]) })
                sent += 200
                try await Task.sleep(for: .milliseconds(5))  // the load's pace, not a wait for an event
            }
            // A real watcher joining during the churn gets its greeting: only then does its
            // stream start with a snapshot.
            let sky = try await cluster.watcher()
            let greeted = Task {
                for try await change in sky.events() {
                    if case .snapshot = change { return true }
                }
                return false
            }
            #expect(try await value(of: greeted, within: .seconds(5), "the watcher's greeting"))
            await loop.shutdown()
            let count = await hellos.value
            print("subscription churn: \(sent) subscriptions in 2 s, \(count) broker.hello published")
            #expect(count >= 2 && count <= 20)
            await sky.close()
        }

        /// Item 5: a client floods the queue with requests that have no deadline and goes away;
        /// it holds at most its share, others still queue, and the flood ends at --max-wait.
        @Test func anOrphanedFloodNeitherFillsTheQueueForeverNorLocksOthersOut() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--queue-limit", "2000", "--max-wait", "2"])
            defer { cluster.killAll() }
            let hung = try await HungWorker(broker: cluster.workers, services: ["hold"], capacity: 1)
            defer { Task { await hung.close() } }
            try await cluster.waitForWorkers(1)
            let flood = try await RawPeer(connectingTo: cluster.clients)
            flood.send((0...2000).map { Self.request(RequestID(high: 3, low: UInt64($0)), "hold") })
            let refused = try await flood.waitForReplies(1000)
            #expect(refused.allSatisfy { $0.status == .overloaded })
            await flood.close()

            let other = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await other.close() } }
            other.send(Self.request(RequestID(high: 4, low: 1), "hold"))
            try await eventually("the other client's request waits beside the flood") {
                (try? await cluster.snapshot().totalQueued) == 1001
            }
            #expect(other.replies.isEmpty)
            let answer = try await other.waitForReplies(1, timeout: .seconds(10))
            #expect(answer.first?.status == .deadlineExceeded)
            try await eventually("the orphans are gone") { (try? await cluster.snapshot().totalQueued) == 0 }
            let counters = try await cluster.snapshot().counters
            #expect(counters.maxWaitExpired == 1001)
            #expect(counters.rejectedClientShare == 1000)
        }

        /// Item 6: 32 requests of 8 MiB against a 64 MiB byte limit: 8 wait, the rest are
        /// refused; once they are answered the broker's resident memory is back near its start.
        @Test func theQueueIsBoundedInBytesAndMemoryReturnsAfterwards() async throws {
            let cluster = try await TestCluster.start(extraArguments: [
                "--queue-bytes", "\(64 << 20)", "--client-queue-share", "1", "--max-wait", "2",
            ])
            defer { cluster.killAll() }
            let hung = try await HungWorker(broker: cluster.workers, services: ["hold"], capacity: 1)
            defer { Task { await hung.close() } }
            try await cluster.waitForWorkers(1)
            let flood = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await flood.close() } }
            flood.send(Self.request(RequestID(high: 5, low: 0), "hold"))
            try await eventually("the worker is busy") { hung.requests.count == 1 }
            let before = try #require(try await cluster.snapshot().memory?.resident)
            let body = [UInt8](repeating: 0x5a, count: 8 << 20)
            for index in 1...32 {
                flood.send(Self.request(RequestID(high: 5, low: UInt64(index)), "hold", body: body))
            }
            let refused = try await flood.waitForReplies(24, timeout: .seconds(30))
            #expect(refused.allSatisfy { $0.status == .overloaded })
            let full = try await cluster.snapshot()
            #expect(full.totalQueued == 8)
            #expect(full.counters.rejectedQueueBytes == 24)
            let peak = full.memory?.resident ?? 0
            _ = try await flood.waitForReplies(32, timeout: .seconds(10))
            try await eventually("resident memory back within 20 % of the start", timeout: .seconds(10)) {
                let resident = try await cluster.snapshot().memory?.resident ?? .max
                return Double(resident) <= Double(before) * 1.2
            }
            let after = try await cluster.snapshot().memory?.resident ?? 0
            print(
                "queue bytes: resident \(before >> 20) MiB before, \(peak >> 20) MiB with 64 MiB queued, \(after >> 20) MiB after"
            )
        }

        /// Item 7: a call to a service no worker serves fails with noWorkers(service:) after the
        /// grace, not after 3 × 30 s, and is not retried.
        /// The priority header written from protocol.md by a hostile peer: every width the
        /// document allows, with extreme and nonsense values, is answered once; every other
        /// width is dropped and counted; the broker keeps serving.
        @Test func requestHeadersOfEveryWidthAndPriorityAreAnsweredOnceOrCountedMalformed() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 2)
            let peer = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await peer.close() } }
            func request(_ low: UInt64, header: [UInt8]) -> [[UInt8]] {
                var frames = Self.request(RequestID(high: 0x9e, low: low), "sky.echo", body: [UInt8(low)])
                frames[4] = header
                return frames
            }
            let base: [UInt8] = [0, 0, 0, 1, 0, 0, 0x27, 0x10]  // attempt 1, 10 s
            let priorities: [[UInt8]] = [
                [0x80, 0, 0, 0], [0x7f, 0xff, 0xff, 0xff], [0, 0, 0, 0x80], [0xde, 0xad, 0xbe, 0xef],
            ]
            let valid: [[UInt8]] =
                [base, base + [0, 0, 0, 0]] + priorities.map { base + [0, 0, 0, 0] + $0 }
                + [base + [0xff, 0xff, 0xff, 0xff] + [0, 0, 0, 5]]
                // The 20-byte header's flags: none, and bits no edition gives a meaning (ignored).
                + [
                    base + [0, 0, 0, 0, 0, 0, 0, 0] + [0, 0, 0, 0],
                    base + [0, 0, 0, 0, 0, 0, 0, 0] + [0xff, 0xff, 0xff, 0xfe],
                ]
            let malformed: [[UInt8]] = [8 + 1, 8 + 7, 16 + 1, 20 + 1, 20 + 4, 4].map { width in
                Array((base + [UInt8](repeating: 0, count: 16)).prefix(width))
            }
            let before = try await cluster.snapshot().counters.malformedClientMessages
            peer.send(malformed.enumerated().map { request(100 + UInt64($0.offset), header: $0.element) })
            peer.send(valid.enumerated().map { request(UInt64($0.offset), header: $0.element) })
            let replies = try await peer.waitForReplies(valid.count)
            #expect(replies.allSatisfy { $0.status == .ok && $0.body == [UInt8($0.requestID.low)] })
            #expect(Set(replies.map(\.requestID.low)) == Set(0..<UInt64(valid.count)), "each valid one once")
            try await Self.malformedCountedAndServing(
                cluster, peer: peer, before: before, malformed: malformed.count, answered: valid.count)
        }

        /// Packed REQUESTs written from protocol.md, whose service names change from one to the
        /// next: the broker keeps the last name it decoded and compares the next one's bytes with
        /// it, so names of one length that differ in one byte (a control character, DEL, a
        /// letter, in the first eight bytes or the tail), and headers that end inside a field,
        /// come in between valid ones. Each valid REQUEST is answered once (by the echo, or
        /// `noWorkers` for the services nobody serves), each malformed one counted and dropped.
        @Test func packedRequestsWithNamesThatDifferByAByteAreEachAnsweredOnceOrCountedMalformed() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 4)
            let peer = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await peer.close() } }
            func bigEndian(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }
            // `SKYC02`, 0x01, request id, attempt 1, timeout 10 s, no-workers 1 ms, priority 0, name.
            func packed(_ low: UInt64, _ name: [UInt8]) -> [[UInt8]] {
                let id =
                    withUnsafeBytes(of: UInt64(0x5a).bigEndian) { Array($0) }
                    + withUnsafeBytes(of: low.bigEndian) { Array($0) }
                let header =
                    Array("SKYC02".utf8) + [0x01] + id + bigEndian(1) + bigEndian(10_000) + bigEndian(1) + bigEndian(0)
                    + name
                return [header, [UInt8(truncatingIfNeeded: low)]]
            }
            let echo = Array("sky.echo".utf8)
            let long = Array("sky.echo.unserved".utf8)
            var valid: [(UInt64, [UInt8])] = []
            var malformed: [[[UInt8]]] = []
            var next: UInt64 = 0
            func add(_ name: [UInt8]) {
                valid.append((next, name))
                next += 1
            }
            for round in 0..<4 {
                add(echo)
                malformed.append(packed(1000 + UInt64(round) * 10, Array("sky.ech".utf8) + [0x01]))
                add(echo)
                malformed.append(packed(1001 + UInt64(round) * 10, Array("sky.ech".utf8) + [0x7f]))
                add(Array("sky.echp".utf8))  // a name of the same length: another service
                add(echo)
                malformed.append(packed(1002 + UInt64(round) * 10, Array(long.dropLast()) + [0x1f]))
                add(long)
                add(Array(long.dropLast()) + [0x65])  // the tail differs
                // 30 bytes: the header ends inside its timeout.
                malformed.append([Array(packed(1003 + UInt64(round) * 10, echo)[0].prefix(30)), [1]])
                add(echo)
            }
            let before = try await cluster.snapshot().counters.malformedClientMessages
            var messages: [[[UInt8]]] = []
            var bad = malformed.makeIterator()
            for (low, name) in valid {
                messages.append(packed(low, name))
                if low % 2 == 1, let one = bad.next() { messages.append(one) }
            }
            while let one = bad.next() { messages.append(one) }
            peer.send(messages)
            let replies = try await peer.waitForReplies(valid.count)
            let names = Dictionary(uniqueKeysWithValues: valid)
            for reply in replies {
                guard let name = names[reply.requestID.low] else {
                    Issue.record("a malformed REQUEST (\(reply.requestID.low)) was answered: \(reply.status)")
                    continue
                }
                if name == echo {
                    #expect(reply.status == .ok && reply.body == [UInt8(reply.requestID.low)], "\(reply.requestID.low)")
                } else {
                    #expect(reply.status == .noWorkers, "\(reply.requestID.low): \(reply.status)")
                }
            }
            #expect(Set(replies.map(\.requestID.low)) == Set(valid.map(\.0)), "each valid one once")
            try await Self.malformedCountedAndServing(
                cluster, peer: peer, before: before, malformed: malformed.count, answered: valid.count)
        }

        /// A flood of job lookups (statuses of ids nobody submitted, each a read of the journal's
        /// disk) from a raw peer: the reads waiting for the journal stay within `--queue-limit`,
        /// every call is answered exactly once (a report, or `overloaded`), and the broker serves on.
        @Test func aFloodOfJobLookupsIsBoundedAndEachAnsweredOnce() async throws {
            let state = JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments + ["--queue-limit", "8"])
            defer { cluster.killAll() }
            let peer = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await peer.close() } }
            let count = 2000
            peer.send(
                (0..<count).map { index in
                    Self.request(
                        RequestID(high: 0x10b, low: UInt64(index)), BrokerService.jobStatus,
                        body: [UInt8](repeating: UInt8(index % 251), count: 16))
                })
            let replies = try await peer.waitForReplies(count)
            #expect(Set(replies.map(\.requestID.low)) == Set(0..<UInt64(count)), "each once")
            let refused = replies.filter { $0.status == .overloaded }
            let read = replies.filter { $0.status == .ok }
            #expect(refused.count + read.count == count)
            #expect(!refused.isEmpty && read.count >= 8, "\(read.count) read, \(refused.count) refused")
            #expect(read.allSatisfy { (try? JobReport(decoding: $0.body))?.state == .unknown })
            #expect(
                refused.allSatisfy { RemoteErrorBody(decoding: $0.body).message.contains("lookups await the journal") })
            print("job lookup flood: \(read.count) read from the journal, \(refused.count) answered overloaded")
            let sky = try await SkyClient(broker: cluster.clients)
            let unknown = JobID(bytes: [UInt8](repeating: 3, count: 16))!
            #expect(try await sky.status(of: unknown) == .unknown, "still serving")
            await sky.close()
            await cluster.stop()
        }

        /// Statuses flooded at jobs while they run and finish (a status of a job whose outcome
        /// waits for the journal's next commit makes the journal commit at once): each is
        /// answered exactly once, with a state the job passed through, and the jobs all end.
        @Test func statusesFloodedAtFinishingJobsAreEachAnsweredOnce() async throws {
            let state = JobTests.StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1")
            let sky = try await SkyClient(broker: cluster.clients)
            let peer = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await peer.close() } }
            var ids: [JobID] = []
            var sent = 0
            for index in 0..<200 {
                ids.append(try await sky.submit(EchoTask(message: "\(index)")).id)
                // 20 statuses of the newest four jobs, sent as the newest one starts and ends.
                peer.send(
                    (0..<20).map { offset in
                        Self.request(
                            RequestID(high: 0x57a, low: UInt64(sent + offset)), BrokerService.jobStatus,
                            body: ids[max(0, ids.count - 1 - offset % 4)].bytes)
                    })
                sent += 20
            }
            let replies = try await peer.waitForReplies(sent)
            #expect(replies.count == sent)
            #expect(Set(replies.map(\.requestID.low)) == Set(0..<UInt64(sent)), "each once")
            let states = replies.compactMap { $0.status == .ok ? try? JobReport(decoding: $0.body).state : nil }
            #expect(states.count == sent, "every status answered with a report")
            #expect(states.allSatisfy { [.queued, .running, .succeeded].contains($0) })
            for (index, id) in ids.enumerated() {
                #expect(try await sky.result(of: id, as: EchoTask.self).message == "\(index)")
                #expect(try await sky.status(of: id) == .succeeded(attempt: 1))
            }
            await sky.close()
            await cluster.stop()
        }

        @Test func callingAnUnservedServiceFailsFastNamingIt() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let sky = try await SkyClient(broker: cluster.clients)
            let started = ContinuousClock.now
            await #expect(throws: SkyError.noWorkers(service: "nobody.home")) {
                _ = try await sky.request(service: "nobody.home", body: [1])
            }
            let elapsed = ContinuousClock.now - started
            #expect(elapsed >= .seconds(2) && elapsed < .seconds(4), "\(elapsed)")
            #expect(await sky.statistics.counters.attemptsSent == 1)
            await sky.close()

            var configuration = SkyClient.Configuration()
            configuration.noWorkersGrace = .milliseconds(300)
            let quick = try await SkyClient(broker: cluster.clients, configuration: configuration)
            let again = ContinuousClock.now
            await #expect(throws: SkyError.noWorkers(service: "nobody.home")) {
                _ = try await quick.request(service: "nobody.home", body: [1])
            }
            #expect(ContinuousClock.now - again < .milliseconds(1500))
            print("noWorkers after \(elapsed) (broker default), \(ContinuousClock.now - again) with a 300 ms grace")
            await quick.close()
        }

        /// Task events are built only for a subscribed topic: junk and unsubscriptions of topics
        /// it never took, sent raw to the events socket, neither crash the broker nor silence a
        /// real watcher's events.
        @Test func junkOnTheEventsSocketLeavesAWatchersEventsFlowing() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--task-events"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 2)
            let watcher = try await cluster.watcher()
            let completed = Task {
                for try await change in watcher.events() {
                    if case .event(let event) = change, event.event == .taskCompleted { return true }
                }
                return false
            }
            let junk = ZMQEventLoop.SocketID(0, name: "junk")
            let loop = try await ZMQEventLoop.start(
                name: "junk", sockets: [.init(id: junk, type: .xsub, connect: [cluster.events])])
            defer { Task { await loop.shutdown() } }
            loop.send([
                .init(socket: junk, frames: [[]]), .init(socket: junk, frames: [[0x02] + Array("task.".utf8)]),
                .init(socket: junk, frames: [[0x00]]), .init(socket: junk, frames: [[0x00] + Array("task.".utf8)]),
                .init(socket: junk, frames: [[0x01], [0x01]]),
            ])
            let sky = try await SkyClient(broker: cluster.clients)
            // Until the watcher sees one (its subscription may still be on the way), scans go on.
            let scanning = Task {
                while !Task.isCancelled {
                    _ = try await sky.scan(EchoTask(message: "seen?"), options: .init(coalesce: false))
                }
            }
            #expect(try await value(of: completed, within: .seconds(20), "a task.completed for the watcher"))
            scanning.cancel()
            #expect(try await cluster.snapshot().workers.count == 1, "the broker still serves")
            await sky.close()
            await watcher.close()
            await cluster.stop()
        }

        /// A watcher that stops reading while tasks run holds a bounded buffer of events (the
        /// oldest dropped), and reads a new snapshot where they were: its stream buffered every
        /// event (measured: skywatch with its output blocked grew 215 MB in 20 s beside 8k tasks
        /// a second with --task-events).
        @Test func aWatcherThatStopsReadingHoldsABoundedBufferAndGoesOnFromANewSnapshot() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--task-events"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 8)
            let watcher = try await cluster.watcher()
            var changes = watcher.events(buffered: 50).makeAsyncIterator()
            guard case .snapshot(let first)? = try await changes.next() else {
                Issue.record("the stream did not begin with a snapshot")
                return
            }
            // 500 tasks, two task events each, published while the watcher reads nothing: far
            // more than its 50, which were all in by the time the last scan returned.
            let sky = try await SkyClient(broker: cluster.clients)
            try await withThrowingDiscardingTaskGroup { group in
                for index in 0..<500 {
                    group.addTask {
                        _ = try await sky.scan(EchoTask(message: "\(index)"), options: .init(coalesce: false))
                    }
                }
            }
            guard case .snapshot(let again)? = try await changes.next() else {
                Issue.record("the events after the dropped ones came without a new snapshot")
                return
            }
            #expect(again.seq >= first.seq + 1000 && (again.tasksCompleted ?? 0) >= 500, "\(again.seq)")
            // Then events again, in order, none twice.
            var last = again.seq
            for _ in 0..<20 {
                guard case .event(let event)? = try await changes.next() else { break }
                #expect(event.seq > last)
                last = event.seq
                if event.event == .brokerStats { break }
            }
            await sky.close()
            await watcher.close()
            await cluster.stop()
        }

        /// Item 8: a client given the workers endpoint, and a worker given the clients endpoint,
        /// each get an error naming the mistake within 2 s; so do a client and a worker given the
        /// events endpoint, and an events subscription (and skywatch) given another port.
        @Test func theWrongPortIsNamedToTheMistakenProcess() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let sky = try await SkyClient(broker: cluster.workers)
            let started = ContinuousClock.now
            do {
                _ = try await sky.request(service: "sky.echo", body: [1])
                Issue.record("a client on the workers port was served")
            } catch let error as SkyError {
                guard case .wrongEndpoint(let message) = error else {
                    Issue.record("expected wrongEndpoint, got \(error)")
                    return
                }
                #expect(message.contains("clients connect to \(cluster.clients)"))
            }
            #expect(ContinuousClock.now - started < .seconds(2))
            await sky.close()

            let worker = try cluster.track(SkyProcess("skyworker", ["--broker", cluster.clients, "--name", "lost"]))
            let status = try await worker.waitForExit(timeout: .seconds(5))
            #expect(status != 0)
            #expect(worker.errorText.contains("workers connect to \(cluster.workers)"), "\(worker.errorText)")
            let counters = try await cluster.snapshot().counters
            #expect(counters.misdirectedMessages >= 2)

            // The events port: the handshake fails on the socket type and libzmq never
            // reconnects. The client used to say after 15 s that the broker was unreachable.
            let deafClient = try await SkyClient(broker: cluster.events)
            let clientStarted = ContinuousClock.now
            let error = await #expect(throws: SkyError.self) {
                _ = try await deafClient.request(service: "sky.echo", body: [1])
            }
            // The likelier mistake first: a broker without CURVE is not told to want it.
            #expect(
                "\(String(describing: error))".contains(
                    "it is not a broker's clients endpoint (its events port? another program's?), or the broker requires CURVE"
                ), "\(String(describing: error))")
            #expect(ContinuousClock.now - clientStarted < .seconds(2))
            await deafClient.close()
            // The clients port given as the events endpoint: the subscription's handshake fails
            // the same way, and events() waited forever (skywatch: "no answer from the broker").
            var misdirected = SkyClient.Configuration()
            misdirected.events = cluster.clients
            let watcher = try await SkyClient(broker: cluster.clients, configuration: misdirected)
            let watchStarted = ContinuousClock.now
            let watchError = await #expect(throws: SkyError.self) {
                for try await _ in watcher.events() {}
            }
            #expect(watchError?.code == .wrongEndpoint)
            #expect("\(String(describing: watchError))".contains("it is not the broker's events endpoint"))
            #expect(ContinuousClock.now - watchStarted < .seconds(2))
            await watcher.close()
            let watch = try cluster.track(
                SkyProcess("skywatch", ["--broker", cluster.clients, "--events", cluster.workers, "--json"]))
            #expect(try await watch.waitForExit(timeout: .seconds(10)) == 1)
            #expect(watch.errorText.contains("it is not the broker's events endpoint"), "\(watch.errorText)")
            // The workers port given as the broker: the watchers said "giving up", then "still
            // trying", and ran on half-working (skyweb served a page of nothing).
            for program in ["skywatch", "skyweb"] {
                let extra = program == "skyweb" ? ["--listen", "127.0.0.1:0"] : ["--json"]
                let wrong = try cluster.track(SkyProcess(program, ["--broker", cluster.workers] + extra))
                #expect(try await wrong.waitForExit(timeout: .seconds(10)) == 1, "\(program)")
                #expect(wrong.errorText.contains("wrong endpoint"), "\(program): \(wrong.errorText)")
            }
            // The worker used to retry forever saying only that the broker was silent.
            let deaf = try cluster.track(SkyProcess("skyworker", ["--broker", cluster.events, "--name", "deaf"]))
            let deafStarted = ContinuousClock.now
            #expect(try await deaf.waitForExit(timeout: .seconds(10)) == 1)
            #expect(ContinuousClock.now - deafStarted < .seconds(5))
            #expect(
                deaf.errorText.contains("\(cluster.events) is not a broker's workers endpoint"), "\(deaf.errorText)")
        }

        /// Item 9: READY may name the documented 1,024 services; a larger one is refused with
        /// REFUSED and a reason instead of silently dropped.
        @Test func aReadyOf1024ServicesRegistersAndALargerOneIsRefused() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let services = (0..<1024).map { "service.\($0)" }
            let fits = try await HungWorker(broker: cluster.workers, services: services)
            defer { Task { await fits.close() } }
            try await eventually("the worker registers with 1,024 services") {
                (try? await cluster.snapshot().workers.first?.services.count) == 1024
            }
            let tooBig = try await RawPeer(connectingTo: cluster.workers)
            defer { Task { await tooBig.close() } }
            tooBig.send(
                WorkerToBroker.ready(WorkerAnnouncement(name: "big", capacity: 1, services: services + ["one.more"]))
                    .encode())
            try await eventually("REFUSED arrives") { !tooBig.workerCommands.isEmpty }
            guard case .refused(let reason) = tooBig.workerCommands.first else {
                Issue.record("expected REFUSED, got \(tooBig.workerCommands)")
                return
            }
            #expect(reason.contains("1024 services"))
            #expect(try await cluster.snapshot().workers.count == 1)
        }
    }
}

/// A task for the hostile worker of `hostileJSONAndTagsFromAWorkerLeaveEveryCallOneAnswer`.
private struct Probe: SkyTask {
    static let service = "test.hostile-json"
    typealias Result = Probe
    var message: String
}
