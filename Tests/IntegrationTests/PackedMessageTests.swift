import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// docs/protocol.md, "Packed messages", between real processes and peers written from the
    /// document alone.
    @Suite("Packed messages: real processes and peers from the docs")
    struct PackedMessageTests {
        /// A real skyworker, given a broker (a raw ROUTER) whose FEATURES names `packed`, asks
        /// for packed REQUESTs with its own FEATURES, runs a packed REQUEST, and answers it and
        /// a framed one packed.
        @Test func aRealWorkerAsksForPackedRequestsAndAnswersPacked() async throws {
            let broker = try await ScriptedBroker.start()
            defer { broker.stop() }
            func task(_ low: UInt64, _ text: String) throws -> TaskRequest {
                TaskRequest(
                    requestID: RequestID(high: 7, low: low), service: EchoTask.service,
                    body: Array(try JSONEncoder().encode(EchoTask(message: text))))
            }

            let worker = try SkyProcess(
                "skyworker", ["--broker", broker.endpoint, "--name", "packed", "--capacity", "4"])
            defer { worker.killNow() }
            let (peer, ready) = try await broker.next()
            guard case .ready = try WorkerToBroker.decode(ready) else {
                Issue.record("expected READY, got \(ready)")
                return
            }
            broker.send(to: peer, BrokerToWorker.features(["max-frame-size=65536", "packed"]).encode())
            #expect(try WorkerToBroker.decode(try await broker.next().frames) == .features(["edition=2", "packed"]))
            broker.send(to: peer, BrokerToWorker.packedRequest(tag: [0, 1], try task(1, "packed in")).encode())
            broker.send(to: peer, BrokerToWorker.request(tag: [0, 2], try task(2, "framed in")).encode())
            var echoed: [DeliveryTag: String] = [:]
            for _ in 0..<2 {
                let frames = try await broker.next().frames
                #expect(frames.count == 2 && frames[0].starts(with: Array("SKYW02".utf8)), "packed: \(frames)")
                guard case .packedReply(let tag, let reply) = try WorkerToBroker.decode(frames) else {
                    Issue.record("expected a packed REPLY")
                    return
                }
                #expect(reply.status == .ok)
                echoed[tag] = try JSONDecoder().decode(EchoTask.self, from: Data(reply.body)).message
            }
            #expect(echoed == [DeliveryTag([0, 1]): "packed in", DeliveryTag([0, 2]): "framed in"])
        }

        /// A client and a worker written from the docs speak packed to a real broker: the
        /// worker asks for packed REQUESTs and answers packed; the packed client's call comes
        /// back packed, a framed client's framed; a packed REQUEST with a header cut short is
        /// dropped and counted, and the broker goes on serving.
        @Test func peersFromTheDocsSpeakPackedToARealBroker() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--state-dir", "none"])
            defer { cluster.killAll() }
            let worker = try await RawPeer(connectingTo: cluster.workers) { frames in
                switch try? BrokerToWorker.decode(frames) {
                case .features(let lines)? where lines.contains("packed"):
                    return WorkerToBroker.features(["packed"]).encode()
                case .packedRequest(let tag, let request)?:
                    let reply = TaskReply(requestID: request.requestID, status: .ok, body: request.body.reversed())
                    return WorkerToBroker.packedReply(tag: tag, reply).encode()
                case .request(let tag, let request)?:
                    Issue.record("a framed REQUEST to a worker that asked for packed ones")
                    return WorkerToBroker.reply(
                        tag: tag, TaskReply(requestID: request.requestID, status: .ok, body: [])
                    )
                    .encode()
                default:
                    return nil
                }
            }
            defer { Task { await worker.close() } }
            worker.send(
                WorkerToBroker.ready(WorkerAnnouncement(name: "raw-packed", capacity: 4, services: ["rev"])).encode())
            try await cluster.waitForWorkers(1)
            // Its FEATURES answer may still be on its way; the broker takes either form meanwhile.
            try await eventually("the worker's FEATURES answered") {
                worker.messages.contains {
                    guard case .features(let lines)? = try? BrokerToWorker.decode($0) else { return false }
                    return lines.dropLast() == ["edition=2", "max-frame-size=16777216", "packed", "progress"]
                        && lines.last?.hasPrefix("heartbeat-ms=") == true
                }
            }

            let packed = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await packed.close() } }
            let framed = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await framed.close() } }
            func request(_ low: UInt64, _ body: [UInt8]) -> TaskRequest {
                TaskRequest(
                    requestID: RequestID(high: 3, low: low), service: "rev",
                    header: RequestHeader(attempt: 1, timeoutMilliseconds: 10_000), body: body)
            }
            let malformedBefore = try await cluster.snapshot().counters.malformedClientMessages
            var cut = ClientToBroker.packedRequest(request(9, [9])).encode()
            cut[0] = Array(cut[0].prefix(30))
            packed.send(cut)
            packed.send(ClientToBroker.packedRequest(request(1, [1, 2, 3])).encode())
            framed.send(ClientToBroker.request(request(2, [4, 5, 6])).encode())

            let packedReplies = try await packed.waitForReplies(1)
            #expect(packedReplies == [TaskReply(requestID: RequestID(high: 3, low: 1), status: .ok, body: [3, 2, 1])])
            #expect(packed.messages.last?.first?.starts(with: Array("SKYC02".utf8)) == true, "answered packed")
            let framedReplies = try await framed.waitForReplies(1)
            #expect(framedReplies == [TaskReply(requestID: RequestID(high: 3, low: 2), status: .ok, body: [6, 5, 4])])
            #expect(framed.messages.last?.first == Array("SKYC01".utf8), "answered framed")
            #expect(try await cluster.snapshot().counters.malformedClientMessages == malformedBefore + 1)
        }

        /// Sky's client asks `mmi.features` as its connection comes up, sends its calls packed
        /// once the broker named `packed` (a call held for the connection may go framed before
        /// the answer), and takes both forms of REPLY.
        @Test func skysClientSendsPackedRequestsOnceTheBrokerNamedThem() async throws {
            let broker = try await FakeBroker.start(reportsFeatures: true)
            defer { Task { await broker.stop() } }
            let sky = try await SkyClient(broker: broker.endpoint)
            defer { Task { await sky.close() } }
            let first = Task { try await sky.request(service: "svc", body: [1]) }
            let ask = await broker.nextRequest()
            let question = try #require(ask.request)
            #expect(question.service == BrokerService.features && ask.command == .request(question))
            let held = await broker.nextRequest()
            broker.reply(
                to: ask.peer,
                TaskReply(requestID: question.requestID, status: .ok, body: Array("max-frame-size=65536\npacked".utf8)))
            broker.echo(held)
            #expect(try await first.value == [1])

            let second = Task { try await sky.request(service: "svc", body: [2]) }
            let sent = await broker.nextRequest()
            guard case .packedRequest(let request) = sent.command else {
                Issue.record("expected a packed REQUEST once the broker named packed, got \(sent.command)")
                return
            }
            #expect(request.service == "svc" && request.body == [2])
            let reply = TaskReply(requestID: request.requestID, attempt: 1, status: .ok, body: [20])
            broker.sendRaw(to: sent.peer, [BrokerToClient.packedReply(reply).encode()])
            #expect(try await second.value == [20])
            #expect(await sky.statistics.counters.attemptsSent == 2, "the question is not a call")
        }
    }
}
