import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    @Suite("Broker under malformed input from raw sockets")
    struct BrokerMalformedInputTests {
        static let raw = ZMQEventLoop.SocketID(0, name: "raw")
        static let id = [UInt8](repeating: 1, count: 16)
        static let header = [UInt8](repeating: 0, count: 8)

        static let clientGarbage: [[[UInt8]]] = [
            [[]],  // empty
            [Array("SKYC01".utf8)],  // one frame
            [Array("MDPC02".utf8), [0x01], Array("sky.echo".utf8), [1]],  // unknown signature
            [Array("SKYC01".utf8), [0x7f]],  // unknown command
            [Array("SKYC01".utf8), [0x01], Array(id.prefix(15)), Array("sky.echo".utf8), header, [1]],  // truncated id
        ]

        static let workerGarbage: [[[UInt8]]] = [
            [[]],
            [Array("SKYW01".utf8)],
            [Array("MDPW02".utf8), [0x01], Array("sky.echo".utf8)],
            [Array("SKYW01".utf8), [0x7f]],
            [Array("SKYW01".utf8), [0x03], [0, 1, 2], Array(id.prefix(15)), [0], [1]],
        ]

        /// Sends messages on a raw DEALER and returns the first message the broker sends back.
        static func sendRaw(_ messages: [[[UInt8]]], to endpoint: String) async throws -> ZMQMessage? {
            try await sendRaw(messages, to: endpoint, expecting: 1).first
        }

        /// Sends messages on a raw DEALER and returns the first `count` messages sent back.
        static func sendRaw(_ messages: [[[UInt8]]], to endpoint: String, expecting count: Int) async throws
            -> [ZMQMessage]
        {
            let loop = try await ZMQEventLoop.start(
                name: "raw-peer", sockets: [.init(id: raw, type: .dealer, connect: [endpoint])])
            loop.send(messages.map { .init(socket: raw, frames: $0) })
            var answers: [ZMQMessage] = []
            for await batch in loop.inbound {
                for case .message(_, let message) in batch { answers.append(message) }
                if answers.count >= count { break }
            }
            await loop.shutdown()
            return answers
        }

        @Test func garbageOnBothPortsIsDroppedCountedAndLoggedWhileRealScansGoOn() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "steady", capacity: 4)
            let sky = try await SkyClient(broker: cluster.clients)

            // Real traffic beside the garbage.
            let traffic = Task {
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<300 {
                        group.addTask { try await sky.scan(EchoTask(message: "\(index)")).message == "\(index)" }
                    }
                    return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
                }
            }

            // Client port: the garbage, then a valid mmi.workers on the same connection; its answer
            // is produced after the broker handled every message before it.
            let snapshotRequest = ClientToBroker.request(
                TaskRequest(requestID: .random(), service: BrokerService.workers, body: [])
            ).encode()
            let clientAnswer = try #require(
                try await Self.sendRaw(Self.clientGarbage + [snapshotRequest], to: cluster.clients))
            guard case .reply(let reply) = try BrokerToClient.decode(clientAnswer.frames) else {
                Issue.record("expected a reply")
                return
            }
            let afterClientGarbage = try JSONDecoder().decode(ClusterSnapshot.self, from: Data(reply.body))
            #expect(afterClientGarbage.counters.malformedClientMessages == UInt64(Self.clientGarbage.count))

            // Worker port: the garbage, then a REPLY, a HEARTBEAT and a FEATURES from this
            // unregistered peer. The broker drops the reply (counted as stale), counts the others
            // as unknown, and answers each with DISCONNECT, after handling everything before them
            // (a FEATURES was once dropped unanswered and uncounted).
            let strayReply = WorkerToBroker.reply(
                tag: [0, 1, 2, 3, 4], TaskReply(requestID: .random(), status: .ok, body: [1])
            ).encode()
            let workerAnswers = try await Self.sendRaw(
                Self.workerGarbage + [
                    strayReply, WorkerToBroker.heartbeat.encode(), WorkerToBroker.features(["packed"]).encode(),
                ], to: cluster.workers, expecting: 3)
            #expect(
                try workerAnswers.map { try BrokerToWorker.decode($0.frames) } == [
                    .disconnect, .disconnect, .disconnect,
                ])

            #expect(try await traffic.value == 300)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.malformedWorkerMessages == UInt64(Self.workerGarbage.count))
            #expect(snapshot.counters.unknownWorkerMessages == 2)
            #expect(snapshot.counters.staleReplies == 1)
            #expect(snapshot.workers.map(\.name) == ["steady"])
            #expect(cluster.broker.isRunning)
            // One log line per dropped message (awaited: log lines and replies travel separately).
            let expected = Self.clientGarbage.count + Self.workerGarbage.count
            let lines = try await cluster.broker.waitUntil(onStandardError: true) {
                $0.filter { $0.contains("dropped malformed message from") }.count >= expected
            }
            #expect(
                lines.filter { $0.contains("dropped malformed message from client") }.count == Self.clientGarbage.count)
            #expect(
                lines.filter { $0.contains("dropped malformed message from worker") }.count == Self.workerGarbage.count)

            await sky.close()
            await cluster.stop()
        }

        /// A peer that sends garbage as fast as it can costs the broker a few log lines a second,
        /// not one a message (each is formatted and written on its I/O thread): every message is
        /// counted, and the log accounts for each, written or summarised as held back.
        @Test func aFloodOfGarbageCostsAFewLogLinesASecondNotOneAMessage() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let flood = 20_000
            let snapshotRequest = ClientToBroker.request(
                TaskRequest(requestID: .random(), service: BrokerService.workers, body: [])
            ).encode()
            let answer = try #require(
                try await Self.sendRaw(
                    Array(repeating: [Array("garbage!".utf8)], count: flood) + [snapshotRequest], to: cluster.clients))
            guard case .reply(let reply) = try BrokerToClient.decode(answer.frames) else {
                Issue.record("expected a reply")
                return
            }
            let snapshot = try JSONDecoder().decode(ClusterSnapshot.self, from: Data(reply.body))
            #expect(snapshot.counters.malformedClientMessages == UInt64(flood))

            let line = "dropped malformed message from client"
            @Sendable func written(_ lines: [String]) -> Int { lines.count { $0.hasSuffix(line) } }
            @Sendable func heldBack(_ lines: [String]) -> Int {
                lines.reduce(0) { sum, text in
                    guard text.contains("line=\(line) "),
                        let match = text.firstMatch(of: #/heldBack=([0-9]+) /#), let count = Int(match.1)
                    else { return sum }
                    return sum + count
                }
            }
            // Summaries come when a second is over: wait until every message is accounted for.
            let lines = try await cluster.broker.waitUntil(onStandardError: true) {
                written($0) + heldBack($0) >= flood
            }
            #expect(written(lines) + heldBack(lines) == flood)
            // At most 10 lines a second (the flood takes well under 10 s here).
            #expect(written(lines) <= 100, "\(written(lines)) lines for \(flood) messages")
            #expect(cluster.broker.isRunning)
            await cluster.stop()
        }
    }
}
