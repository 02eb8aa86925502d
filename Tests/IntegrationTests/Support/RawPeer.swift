import Foundation
import SkyProtocol
import SkyTestSupport
import SkyZMQ

/// A peer written from docs/protocol.md alone: one DEALER on its own I/O thread, speaking raw
/// frames. Hostile and careless clients and workers in the tests are made of these.
final class RawPeer: Sendable {
    static let socket = ZMQEventLoop.SocketID(0, name: "raw")

    let loop: ZMQEventLoop
    /// Every message, and the client REPLYs among them (framed or packed), decoded once as they arrive (a test
    /// waiting for 100,000 replies must not decode them all again on every check: that would
    /// take the CPU from the broker it measures).
    private let received = Locked<(messages: [[[UInt8]]], replies: [TaskReply])>(([], []))
    private let reader: Task<Void, Never>

    /// Connects a DEALER to `endpoint`, with `identity` as its routing id if given; `answer`
    /// sees each message as it arrives, and what it returns is sent back at once (a scripted peer).
    init(
        connectingTo endpoint: String, identity: [UInt8]? = nil,
        answer: (@Sendable (_ frames: [[UInt8]]) -> [[UInt8]]?)? = nil
    ) async throws {
        let options: [ZMQSocketOption] =
            [.sendHighWaterMark(0), .receiveHighWaterMark(0)] + (identity.map { [.routingID($0)] } ?? [])
        loop = try await ZMQEventLoop.start(
            name: "raw-peer", sockets: [.init(id: Self.socket, type: .dealer, options: options, connect: [endpoint])])
        let inbound = loop.inbound
        let received = received
        let loop = loop
        reader = Task {
            for await batch in inbound {
                let messages = batch.compactMap {
                    if case .message(_, let message) = $0 { message.frames } else { nil }
                }
                if let answer {
                    loop.send(messages.compactMap(answer).map { .init(socket: Self.socket, frames: $0) })
                }
                let replies = messages.compactMap { frames -> TaskReply? in
                    switch try? BrokerToClient.decode(frames) {
                    case .reply(let reply)?, .packedReply(let reply)?: reply
                    case nil: nil
                    }
                }
                received.withLock {
                    $0.messages += messages
                    $0.replies += replies
                }
            }
        }
    }

    func send(_ frames: [[UInt8]]) { loop.send(frames, on: Self.socket) }

    func send(_ messages: [[[UInt8]]]) { loop.send(messages.map { .init(socket: Self.socket, frames: $0) }) }

    /// Every message received so far.
    var messages: [[[UInt8]]] { received.withLock { $0.messages } }

    /// The client REPLYs received so far.
    var replies: [TaskReply] { received.withLock { $0.replies } }

    /// How many client REPLYs arrived so far.
    var replyCount: Int { received.withLock { $0.replies.count } }

    /// The worker commands received so far.
    var workerCommands: [BrokerToWorker] { messages.compactMap { try? BrokerToWorker.decode($0) } }

    /// Waits until `count` client REPLYs have arrived.
    func waitForReplies(_ count: Int, timeout: Duration = .seconds(20)) async throws -> [TaskReply] {
        try await eventually("\(count) replies (have \(replyCount))", timeout: timeout) { replyCount >= count }
        return replies
    }

    /// Closes the socket; `flushing` first lets what was sent leave it instead of dropping it:
    /// up to a minute, so that a broker slowed by a loaded machine still gets all of it (with 5
    /// s, the hostile soak's 20,000 orphans lost 4,981 on a machine busy compiling, and its
    /// count of them failed).
    func close(flushing: Bool = false) async {
        await loop.shutdown(linger: flushing ? 60_000 : 0)
        reader.cancel()
    }
}

/// A worker written from the protocol doc that registers and heartbeats but answers only when
/// told: a worker whose handler hangs while the process stays alive.
final class HungWorker: Sendable {
    let peer: RawPeer
    private let heartbeats: Task<Void, Never>

    /// With `respond`, it answers every REQUEST as it arrives with the body `respond` returns
    /// (a worker that lies, for example); without, it holds them until told.
    convenience init(
        broker: String, services: [String], capacity: UInt32 = 4, heartbeat: Duration = .milliseconds(250),
        respond: (@Sendable (TaskRequest) -> [UInt8])? = nil
    ) async throws {
        var replying: (@Sendable (DeliveryTag, TaskRequest) -> WorkerToBroker)?
        if let respond {
            replying = { tag, request in
                WorkerToBroker.reply(
                    tag: tag, TaskReply(requestID: request.requestID, status: .ok, body: respond(request)))
            }
        }
        try await self.init(
            broker: broker, services: services, capacity: capacity, heartbeat: heartbeat, replying: replying)
    }

    /// With `replying`, it answers every REQUEST as it arrives with whatever message `replying`
    /// makes of it (any status, any tag).
    init(
        broker: String, services: [String], capacity: UInt32 = 4, heartbeat: Duration = .milliseconds(250),
        replying: (@Sendable (DeliveryTag, TaskRequest) -> WorkerToBroker)?
    ) async throws {
        var answer: (@Sendable ([[UInt8]]) -> [[UInt8]]?)?
        if let replying {
            answer = { frames in Self.reply(to: frames, with: replying) }
        }
        peer = try await RawPeer(connectingTo: broker, answer: answer)
        peer.send(
            WorkerToBroker.ready(WorkerAnnouncement(name: "hung", capacity: capacity, services: services)).encode())
        let peer = peer
        heartbeats = Task {
            while !Task.isCancelled {
                peer.send(WorkerToBroker.heartbeat.encode())
                try? await Task.sleep(for: heartbeat)  // the heartbeats' pace
            }
        }
    }

    /// The REQUESTs it was handed, with their delivery tags.
    var requests: [(tag: DeliveryTag, request: TaskRequest)] {
        peer.workerCommands.compactMap { if case .request(let tag, let request) = $0 { (tag, request) } else { nil } }
    }

    /// The message `replying` makes of a REQUEST; `nil` for any other command.
    private static func reply(
        to frames: [[UInt8]], with replying: (DeliveryTag, TaskRequest) -> WorkerToBroker
    ) -> [[UInt8]]? {
        guard case .request(let tag, let request)? = try? BrokerToWorker.decode(frames) else { return nil }
        return replying(tag, request).encode()
    }

    /// Answers every REQUEST it holds now, echoing the body (late, as a hung handler finally would).
    func answerAll() {
        for delivery in requests { answer(delivery) }
    }

    /// Answers one delivery, echoing its body.
    func answer(_ delivery: (tag: DeliveryTag, request: TaskRequest)) {
        let reply = TaskReply(requestID: delivery.request.requestID, status: .ok, body: delivery.request.body)
        peer.send(WorkerToBroker.reply(tag: delivery.tag, reply).encode())
    }

    func close() async {
        heartbeats.cancel()
        await peer.close()
    }
}
