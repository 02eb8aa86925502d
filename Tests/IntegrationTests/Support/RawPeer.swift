import Foundation
import SkyProtocol
import SkyTestSupport
import SkyZMQ

/// A peer written from docs/protocol.md alone: one DEALER on its own I/O thread, speaking raw
/// frames. Hostile and careless clients and workers in the tests are made of these.
final class RawPeer: Sendable {
    static let socket = ZMQEventLoop.SocketID(0, name: "raw")

    let loop: ZMQEventLoop
    private let received = Locked<[[[UInt8]]]>([])
    private let reader: Task<Void, Never>

    /// Connects a DEALER to `endpoint`, with `identity` as its routing id if given.
    init(connectingTo endpoint: String, identity: [UInt8]? = nil) async throws {
        let options: [ZMQSocketOption] =
            [.sendHighWaterMark(0), .receiveHighWaterMark(0)] + (identity.map { [.routingID($0)] } ?? [])
        loop = try await ZMQEventLoop.start(
            name: "raw-peer", sockets: [.init(id: Self.socket, type: .dealer, options: options, connect: [endpoint])])
        let inbound = loop.inbound
        let received = received
        reader = Task {
            for await batch in inbound {
                let messages = batch.compactMap {
                    if case .message(_, let message) = $0 { message.frames } else { nil }
                }
                received.withLock { $0 += messages }
            }
        }
    }

    func send(_ frames: [[UInt8]]) { loop.send(frames, on: Self.socket) }

    func send(_ messages: [[[UInt8]]]) { loop.send(messages.map { .init(socket: Self.socket, frames: $0) }) }

    /// Every message received so far.
    var messages: [[[UInt8]]] { received.withLock { $0 } }

    /// The client REPLYs received so far.
    var replies: [TaskReply] {
        messages.compactMap { if case .reply(let reply)? = try? BrokerToClient.decode($0) { reply } else { nil } }
    }

    /// The worker commands received so far.
    var workerCommands: [BrokerToWorker] { messages.compactMap { try? BrokerToWorker.decode($0) } }

    /// Waits until `count` client REPLYs have arrived.
    func waitForReplies(_ count: Int, timeout: Duration = .seconds(20)) async throws -> [TaskReply] {
        try await eventually("\(count) replies (have \(replies.count))", timeout: timeout) { replies.count >= count }
        return replies
    }

    func close() async {
        await loop.shutdown()
        reader.cancel()
    }
}

/// A worker written from the protocol doc that registers and heartbeats but answers only when
/// told: a worker whose handler hangs while the process stays alive.
final class HungWorker: Sendable {
    let peer: RawPeer
    private let heartbeats: Task<Void, Never>

    init(broker: String, services: [String], capacity: UInt32 = 4, heartbeat: Duration = .milliseconds(250))
        async throws
    {
        peer = try await RawPeer(connectingTo: broker)
        peer.send(
            WorkerToBroker.ready(WorkerAnnouncement(name: "hung", capacity: capacity, services: services)).encode())
        let peer = peer
        heartbeats = Task {
            while !Task.isCancelled {
                peer.send(WorkerToBroker.heartbeat.encode())
                try? await Task.sleep(for: heartbeat)
            }
        }
    }

    /// The REQUESTs it was handed, with their delivery tags.
    var requests: [(tag: [UInt8], request: TaskRequest)] {
        peer.workerCommands.compactMap { if case .request(let tag, let request) = $0 { (tag, request) } else { nil } }
    }

    /// Answers every REQUEST it holds now, echoing the body (late, as a hung handler finally would).
    func answerAll() {
        for (tag, request) in requests {
            peer.send(
                WorkerToBroker.reply(tag: tag, TaskReply(requestID: request.requestID, status: .ok, body: request.body))
                    .encode())
        }
    }

    func close() async {
        heartbeats.cancel()
        await peer.close()
    }
}
