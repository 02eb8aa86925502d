import Sky
import SkyProtocol
import SkyWire
import SkyZMQ
import Testing

/// A raw ROUTER playing the broker: it reports every message a client sends, with its arrival
/// time, and answers only what the test tells it to. Read what arrived with ``next()``.
///
/// A client asks `mmi.features` on each new connection: unless started with `reportsFeatures`,
/// the fake answers that itself as a broker that predates it (`unknownService`), and does not
/// report it, so that tests see the calls they make.
final class FakeBroker: Sendable {
    struct Received: Sendable {
        let peer: [UInt8]
        let command: ClientToBroker
        let at: ContinuousClock.Instant

        /// The REQUEST, framed or packed.
        var request: TaskRequest? {
            switch command {
            case .request(let request), .packedRequest(let request): request
            case .cancel: nil
            }
        }
    }

    static let socket = ZMQEventLoop.SocketID(0, name: "fake-broker")
    let endpoint: String
    private let loop: ZMQEventLoop
    private let pump: Task<Void, Never>
    private let mailbox = Locked<(arrived: [Received], waiter: Waiter?)>(([], nil))

    /// The one reader waiting, numbered so that its deadline resumes it and nobody after it.
    private struct Waiter {
        let number: Int
        let continuation: CheckedContinuation<Received?, Never>
    }

    private let waiters = Locked(0)
    private let accepted = Locked(0)

    /// Connections the ROUTER accepted so far (a routing id cannot tell them apart: a client
    /// keeps its id on every connection).
    var acceptedConnections: Int { accepted.withLock { $0 } }
    /// Messages that arrived and were not taken with ``next()`` yet.
    var unread: Int { mailbox.withLock { $0.arrived.count } }

    private init(loop: ZMQEventLoop, endpoint: String, reportsFeatures: Bool) {
        self.loop = loop
        self.endpoint = endpoint
        let inbound = loop.inbound
        let mailbox = mailbox
        let accepted = accepted
        pump = Task {
            for await batch in inbound {
                for case .monitor(_, let event) in batch where event.kind == .accepted {
                    accepted.withLock { $0 += 1 }
                }
                for case .message(_, let message) in batch {
                    let frames = message.frames
                    guard frames.count > 1, let command = try? ClientToBroker.decode(Array(frames.dropFirst())) else {
                        continue
                    }
                    if !reportsFeatures, case .request(let request) = command, request.service == BrokerService.features
                    {
                        let answer = TaskReply.failure(
                            request.requestID, .unknownService,
                            message: "501: the broker has no internal service mmi.features",
                            attempt: request.header.attempt)
                        loop.send([frames[0]] + BrokerToClient.reply(answer).encode(), on: Self.socket)
                        continue
                    }
                    let received = Received(peer: frames[0], command: command, at: .now)
                    let waiter = mailbox.withLock { box -> Waiter? in
                        guard let waiter = box.waiter else {
                            box.arrived.append(received)
                            return nil
                        }
                        box.waiter = nil
                        return waiter
                    }
                    waiter?.continuation.resume(returning: received)
                }
            }
        }
    }

    /// The next message a client sent, in arrival order; waits for it. One reader at a time.
    func next() async -> Received {
        while true {
            if let message = await next(within: nil) { return message }
        }
    }

    /// The next message, or `nil` when none arrived within `timeout` (`nil`: no limit): for an
    /// absence, which can only be observed over a window.
    func next(within timeout: Duration?) async -> Received? {
        let number = waiters.withLock { count in
            count += 1
            return count
        }
        return await withCheckedContinuation { continuation in
            let ready = mailbox.withLock { box -> Received? in
                if !box.arrived.isEmpty { return box.arrived.removeFirst() }
                box.waiter = Waiter(number: number, continuation: continuation)
                return nil
            }
            if let ready {
                continuation.resume(returning: ready)
            } else if let timeout {
                let mailbox = mailbox
                Task {
                    try? await Task.sleep(for: timeout)  // the receive's time limit, not a wait for it
                    let expired = mailbox.withLock { box -> Waiter? in
                        guard box.waiter?.number == number else { return nil }
                        defer { box.waiter = nil }
                        return box.waiter
                    }
                    expired?.continuation.resume(returning: nil)
                }
            }
        }
    }

    /// The next REQUEST, skipping other commands.
    func nextRequest() async -> Received {
        while true {
            let message = await next()
            if message.request != nil { return message }
        }
    }

    /// The next REQUEST within `timeout`, skipping other commands; `nil` when none came.
    func nextRequest(within timeout: Duration) async -> Received? {
        let deadline = ContinuousClock.now + timeout
        while let message = await next(within: deadline - .now) {
            if message.request != nil { return message }
        }
        return nil
    }

    /// Binds a ROUTER to a free loopback port (or to `endpoint`).
    static func start(on endpoint: String = "tcp://127.0.0.1:*", reportsFeatures: Bool = false) async throws
        -> FakeBroker
    {
        let loop = try await ZMQEventLoop.start(
            name: "fake-broker",
            sockets: [
                .init(
                    id: socket, type: .router, options: [.routerMandatory(true), .sendHighWaterMark(100_000)],
                    bind: [endpoint],
                    monitor: [.accepted])
            ])
        return FakeBroker(loop: loop, endpoint: loop.boundEndpoints(of: socket)[0], reportsFeatures: reportsFeatures)
    }

    func reply(to peer: [UInt8], _ reply: TaskReply) {
        loop.send([peer] + BrokerToClient.reply(reply).encode(), on: Self.socket)
    }

    /// Sends any frames to `peer`: for a broker that misbehaves.
    func sendRaw(to peer: [UInt8], _ messages: [[[UInt8]]]) {
        loop.send(messages.map { .init(socket: Self.socket, frames: [peer] + $0) })
    }

    /// Answers a request as a worker would have: status ok, the body echoed.
    func echo(_ received: Received) {
        guard let request = received.request else { return }
        reply(
            to: received.peer,
            TaskReply(requestID: request.requestID, attempt: request.header.attempt, status: .ok, body: request.body))
    }

    func stop() async {
        await loop.shutdown()
        pump.cancel()
    }
}

/// A free loopback endpoint nobody listens on (bound, then released).
func unusedEndpoint() async throws -> String {
    let broker = try await FakeBroker.start()
    let endpoint = broker.endpoint
    await broker.stop()
    return endpoint
}

extension FakeBroker {
    /// A fake broker and a client whose first call (`first` to `svc`) it answered: the client is
    /// connected, so later calls go out at once instead of waiting for a connection.
    static func startWithConnectedClient(first body: [UInt8] = [0]) async throws -> (FakeBroker, SkyClient) {
        let broker = try await FakeBroker.start()
        let sky = try await SkyClient(broker: broker.endpoint)
        let first = Task { try await sky.request(service: "svc", body: body) }
        broker.echo(await broker.nextRequest())
        #expect(try await first.value == body)
        return (broker, sky)
    }
}
