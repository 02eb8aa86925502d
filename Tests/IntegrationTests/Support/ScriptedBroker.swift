import SkyProtocol
import SkyZMQ

/// A raw ROUTER playing the broker for real workers: it reads what they send, HEARTBEATs left
/// out, and sends only what the test tells it to, so a test can script every message.
final class ScriptedBroker {
    static let socket = ZMQEventLoop.SocketID(0, name: "scripted-broker")
    let endpoint: String
    private let loop: ZMQEventLoop
    private var inbound: ZMQEventLoop.InboundBatches.AsyncIterator
    /// Messages read and not yet taken: one batch can hold several.
    private var unread: [(peer: [UInt8], frames: [[UInt8]])] = []

    private init(loop: ZMQEventLoop, endpoint: String) {
        self.loop = loop
        self.endpoint = endpoint
        inbound = loop.inbound.makeAsyncIterator()
    }

    /// Binds the ROUTER to a free loopback port.
    static func start() async throws -> ScriptedBroker {
        let loop = try await ZMQEventLoop.start(
            name: "scripted-broker", sockets: [.init(id: socket, type: .router, bind: ["tcp://127.0.0.1:*"])])
        return ScriptedBroker(loop: loop, endpoint: loop.boundEndpoints(of: socket)[0])
    }

    /// The next message other than a HEARTBEAT: the sender's routing id and its frames.
    func next() async throws -> (peer: [UInt8], frames: [[UInt8]]) {
        while unread.isEmpty {
            guard let batch = await inbound.next() else { throw CancellationError() }
            for case .message(_, let message) in batch {
                let frames = Array(message.frames.dropFirst())
                if (try? WorkerToBroker.decode(frames)) != .heartbeat { unread.append((message.frames[0], frames)) }
            }
        }
        return unread.removeFirst()
    }

    /// The next message other than a HEARTBEAT that decodes as a worker command; others are skipped.
    func nextCommand() async throws -> (peer: [UInt8], command: WorkerToBroker) {
        while true {
            let (peer, frames) = try await next()
            if let command = try? WorkerToBroker.decode(frames) { return (peer, command) }
        }
    }

    func send(to peer: [UInt8], _ frames: [[UInt8]]) {
        loop.send([peer] + frames, on: Self.socket)
    }

    /// Closes the ROUTER in the background (from a `defer`).
    func stop() {
        let loop = loop
        Task { await loop.shutdown() }
    }
}
