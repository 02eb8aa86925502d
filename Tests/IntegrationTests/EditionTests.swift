import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension InProcessSuite {
    /// docs/protocol.md, "Editions": the broker names its edition, peers that ignore lines they
    /// do not know keep working, and a worker speaking exactly edition 1 is still served.
    @Suite("Editions: announced, and the previous one served")
    struct EditionTests {
        static let signature = Array("SKYW01".utf8)

        /// A worker written from edition 1's tables alone (docs/protocol.md as first published):
        /// READY, a HEARTBEAT now and then (edition 1 let a worker send them; edition 2 needs a
        /// message within `liveness × interval`), a REQUEST of 7 frames whose frame 2 it takes
        /// for the client's address and echoes, a REPLY of 6 frames, and every command it does
        /// not know (FEATURES, CANCEL) dropped as malformed. The broker of edition 2 serves it,
        /// and a client gets its answer.
        @Test func aWorkerOfEditionOneIsServed() async throws {
            let cluster = try await InProcessCluster.start()
            let dropped = Locked<[UInt8]>([])
            // The broker's HEARTBEATs, one a second: what shows it keeps the worker.
            let heard = Locked(0)
            let worker = try await RawPeer(connectingTo: cluster.workers) { frames in
                guard frames.count >= 2, frames[0] == Self.signature, frames[1].count == 1 else { return nil }
                switch frames[1][0] {
                case 0x02 where frames.count == 7:
                    // REQUEST: [SKYW01][0x02][client address][request id][service][header][body].
                    return [Self.signature, [0x03], frames[2], frames[3], [0x00], frames[6].reversed()]
                case 0x04:
                    heard.withLock { $0 += 1 }
                    return nil
                case 0x05:
                    return nil
                default:
                    dropped.withLock { $0.append(frames[1][0]) }
                    return nil
                }
            }
            defer { Task { await worker.close() } }
            worker.send([Self.signature, [0x01], Array("edition-1".utf8), [0, 0, 0, 2], Array("old.rev".utf8)])
            let heartbeats = Task {
                while !Task.isCancelled {
                    worker.send([Self.signature, [0x04]])
                    try? await Task.sleep(for: .milliseconds(250))  // the worker's pace, not a wait
                }
            }
            defer { heartbeats.cancel() }
            try await cluster.waitForWorkers(1)

            let client = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await client.close() } }
            for low in 1...3 as ClosedRange<UInt64> {
                client.send(
                    ClientToBroker.request(
                        TaskRequest(
                            requestID: RequestID(high: 1, low: low), service: "old.rev",
                            header: RequestHeader(attempt: 1, timeoutMilliseconds: 10_000), body: [1, 2, UInt8(low)])
                    ).encode())
            }
            let replies = try await client.waitForReplies(3)
            let sent: Set<RequestID> = [
                RequestID(high: 1, low: 1), RequestID(high: 1, low: 2), RequestID(high: 1, low: 3),
            ]
            #expect(Set(replies.map(\.requestID)) == sent)
            let answered = replies.allSatisfy { reply in
                reply.status == .ok && reply.body.count == 3 && reply.body.last == 1
            }
            #expect(answered)
            // Served past the expiry (3 s) on its heartbeats alone, and still registered: the
            // broker heartbeats it for 4 s more (a worker it had dropped would hear DISCONNECT).
            let before = heard.withLock { $0 }
            try await eventually("four more of the broker's heartbeats") { heard.withLock { $0 } >= before + 4 }
            let snapshot = try await cluster.snapshot()
            #expect(snapshot.workers.map(\.name) == ["edition-1"])
            #expect(snapshot.counters.malformedWorkerMessages == 0 && snapshot.counters.unknownWorkerMessages == 0)
            #expect(dropped.withLock { $0 } == [0x09], "the edition-2 FEATURES it did not know, dropped")
            await cluster.stop()
        }

        /// The broker names its edition to a client asking `mmi.features` and to every worker in
        /// FEATURES; Sky's client and worker, which skip lines they do not know, serve a call as
        /// before.
        @Test func theEditionIsAnnouncedAndSkysPeersWorkBesideIt() async throws {
            let cluster = try await InProcessCluster.start()
            try await cluster.startWorker(name: "current", capacity: 2)
            let raw = try await RawPeer(connectingTo: cluster.clients)
            defer { Task { await raw.close() } }
            raw.send(
                ClientToBroker.request(
                    TaskRequest(requestID: RequestID(high: 2, low: 1), service: BrokerService.features, body: [])
                ).encode())
            let answer = try #require(try await raw.waitForReplies(1).first)
            let lines = String(decoding: answer.body, as: UTF8.self).split(separator: "\n").map(String.init)
            #expect(lines.first == "edition=2", "\(lines)")
            #expect(lines.contains("no-workers-ms") && lines.contains("priority") && lines.contains("packed"))

            let sky = try await SkyClient(broker: cluster.clients)
            defer { Task { await sky.close() } }
            #expect(try await sky.scan(EchoTask(message: "edition 2")).message == "edition 2")
            let options = ScanOptions(priority: .high)
            #expect(try await sky.scan(EchoTask(message: "long header"), options: options).message == "long header")
            await cluster.stop()
        }
    }
}
