import Foundation
import SkyProtocol
import SkyWire
import Testing

@testable import SkyZMQ

@Suite("libzmq wrapper: sockets")
struct ZMQSocketTests {
    @Test(arguments: Transport.allCases)
    func multipartRoundTrip(transport: Transport) async throws {
        try await onThread {
            let context = try ZMQContext()
            let router = try ZMQSocket(context: context, type: .router)
            try router.bind(transport.endpoint())
            let dealer = try ZMQSocket(context: context, type: .dealer)
            try dealer.connect(router.lastEndpoint)

            let big = [UInt8](repeating: 0xab, count: 1 << 20)
            let frames: [[UInt8]] = [Array("hello".utf8), [], [0, 1, 2], big]
            #expect(try dealer.send(frames))
            let received = try #require(try router.receive())
            #expect(received.frames.count == 5)
            #expect(Array(received.frames.dropFirst()) == frames)
            #expect(received.userID == nil)

            // The routing id in frame 0 sends the reply back to that dealer.
            try router.send([received.frames[0], Array("world".utf8)])
            #expect(try dealer.receive()?.frames == [Array("world".utf8)])
            dealer.close()
            router.close()
        }
    }

    /// Two PAIR sockets connected over inproc, with their context (kept alive by the caller).
    static func connectedPair() throws -> (ZMQContext, sender: ZMQSocket, receiver: ZMQSocket) {
        let context = try ZMQContext()
        let endpoint = "inproc://pair-\(UUID().uuidString)"
        let receiver = try ZMQSocket(context: context, type: .pair)
        try receiver.bind(endpoint)
        let sender = try ZMQSocket(context: context, type: .pair)
        try sender.connect(endpoint)
        return (context, sender, receiver)
    }

    /// A received message is held as libzmq messages (on the stack up to 12 frames, then on
    /// the heap) and copied into one buffer: every size across that boundary, large frames
    /// (libzmq's own allocations) and small ones (kept inside `zmq_msg_t`) alike, comes out whole.
    @Test(arguments: [1, 12, 13, 1029])
    func messagesOfManyFramesArriveWhole(frameCount: Int) async throws {
        try await onThread {
            let (context, sender, receiver) = try Self.connectedPair()
            defer { withExtendedLifetime(context) {} }
            let frames = (0..<frameCount).map { index in
                [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: index % 3 == 0 ? 100 + index : index % 7)
            }
            for _ in 0..<2 {
                #expect(try sender.send(Frames(frames)))
                let received = try #require(try receiver.receive())
                #expect(received.content.count == frameCount)
                #expect(received.frames == frames)
                #expect(received.byteCount == frames.reduce(0) { $0 + $1.count })
            }
            #expect(try receiver.receive(dontWait: true) == nil)
            sender.close()
            receiver.close()
        }
    }

    /// A message sent from its parts (``FrameParts``) arrives as the frames it names: a routing
    /// id, a head written on the stack, the body and the trailer from their arrays.
    @Test func aMessageSentFromItsPartsArrivesWhole() async throws {
        try await onThread {
            let (context, sender, receiver) = try Self.connectedPair()
            defer { withExtendedLifetime(context) {} }
            let routingID: [UInt8] = [7, 7, 7, 7, 7]
            let messages: [(body: [UInt8], trailer: [UInt8]?)] = [
                ([], nil), (Array(1...64), [9, 9]), ([UInt8](repeating: 5, count: 3000), nil),
            ]
            for (body, trailer) in messages {
                let sent = try routingID.withUnsafeBytes { id in
                    try FrameParts.lend(
                        routedTo: id, headBytes: 3, body: body[...], trailer: trailer,
                        head: { head in
                            head.byte(1)
                            head.byte(2)
                            head.byte(3)
                        }, to: { parts in Result { () throws(ZMQError) in try sender.send(parts) } }
                    ).get()
                }
                #expect(sent)
                // Waited for with a bound: a message whose last frame never went stays unreadable.
                var poller = ZMQPoller()
                poller.add(receiver, events: .readable)
                try #require(try poller.poll(timeoutMilliseconds: 10_000) == 1, "the whole message arrives")
                let received = try #require(try receiver.receive())
                #expect(received.frames == [routingID, [1, 2, 3], body] + (trailer.map { [$0] } ?? []))
            }
            sender.close()
            receiver.close()
        }
    }

    @Test func receiveWithDontWaitReturnsNilWhenIdle() async throws {
        try await onThread {
            let context = try ZMQContext()
            let socket = try ZMQSocket(context: context, type: .dealer)
            try socket.bind("inproc://idle-\(UUID().uuidString)")
            #expect(try socket.receive(dontWait: true) == nil)
        }
    }

    @Test func pollTimesOut() async throws {
        let elapsed = try await onThread {
            let context = try ZMQContext()
            let socket = try ZMQSocket(context: context, type: .dealer)
            try socket.bind("tcp://127.0.0.1:*")
            var poller = ZMQPoller()
            poller.add(socket, events: .readable)
            let start = ContinuousClock.now
            let ready = try poller.poll(timeoutMilliseconds: 100)
            #expect(ready == 0)
            #expect(poller.ready(at: 0).isEmpty)
            return ContinuousClock.now - start
        }
        #expect(elapsed >= .milliseconds(95))
        // Returned, not stuck: room for a stalled machine (every test took 11 s once).
        #expect(elapsed < .seconds(30))
    }

    @Test func pollSeesReadableSocketsAndPipes() async throws {
        try await onThread {
            let (context, b, a) = try Self.connectedPair()
            defer { withExtendedLifetime(context) {} }
            var fds: [Int32] = [0, 0]
            #expect(pipe(&fds) == 0)
            defer { close(fds[0]); close(fds[1]) }
            var poller = ZMQPoller()
            poller.add(a, events: .readable)
            poller.add(fileDescriptor: fds[0], events: .readable)
            try b.send([[1]])
            var byte: UInt8 = 1
            _ = write(fds[1], &byte, 1)
            #expect(try poller.poll(timeoutMilliseconds: 1000) == 2)
            #expect(poller.ready(at: 0).contains(.readable))
            #expect(poller.ready(at: 1).contains(.readable))
        }
    }

    @Test func bindingAnEndpointInUseGivesAClearError() async throws {
        try await onThread {
            let context = try ZMQContext()
            let first = try ZMQSocket(context: context, type: .router)
            try first.bind("tcp://127.0.0.1:*")
            let endpoint = first.lastEndpoint
            let second = try ZMQSocket(context: context, type: .router)
            let error = #expect(throws: ZMQError.self) { try second.bind(endpoint) }
            #expect(error?.isAddressInUse == true)
            #expect(error?.description == "zmq_bind(\(endpoint)): Address already in use")
        }
    }

    /// An `ipc://` path another socket listens on is in use too: libzmq removed the socket file
    /// and took its place, so a second broker on the same paths silently took the first one's
    /// new connections. A stale file nobody listens on is taken over, as before.
    @Test func bindingAnIPCPathSomeoneListensOnGivesTheSameError() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sky-ipc-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://\(directory.path)/broker"
        try await onThread {
            let context = try ZMQContext()
            let first = try ZMQSocket(context: context, type: .router)
            try first.bind(endpoint)
            let second = try ZMQSocket(context: context, type: .router)
            let error = #expect(throws: ZMQError.self) { try second.bind(endpoint) }
            #expect(error?.description == "zmq_bind(\(endpoint)): Address already in use")
            // The first keeps its path: a peer still reaches it.
            let peer = try ZMQSocket(context: context, type: .dealer)
            try peer.connect(endpoint)
            _ = try peer.send([[1]])
            var poller = ZMQPoller()
            poller.add(first, events: .readable)
            #expect(try poller.poll(timeoutMilliseconds: 5000) == 1, "the first socket still gets its peers")
            #expect(try first.receive(dontWait: true)?.frames.last == [1])
            first.close(linger: 0)
            peer.close(linger: 0)
            second.close(linger: 0)
        }
        // Closed, its socket file may stay behind; nobody listens, so a new bind takes it.
        try await onThread {
            let context = try ZMQContext()
            let again = try ZMQSocket(context: context, type: .router)
            try again.bind(endpoint)
            again.close(linger: 0)
        }
    }

    @Test func invalidEndpointGivesATypedError() async throws {
        try await onThread {
            let context = try ZMQContext()
            let socket = try ZMQSocket(context: context, type: .dealer)
            let error = #expect(throws: ZMQError.self) { try socket.connect("nonsense://x") }
            #expect(error?.operation == "zmq_connect(nonsense://x)")
            #expect(error?.message.isEmpty == false)
        }
    }

    @Test func routerMandatoryReportsAnUnknownPeer() async throws {
        try await onThread {
            let context = try ZMQContext()
            let router = try ZMQSocket(context: context, type: .router)
            try router.set(.routerMandatory(true))
            try router.bind("inproc://mandatory-\(UUID().uuidString)")
            let error = #expect(throws: ZMQError.self) { try router.send([[9, 9, 9], [1]], dontWait: true) }
            #expect(error?.isHostUnreachable == true)
        }
    }

    @Test func optionsApply() async throws {
        try await onThread {
            let context = try ZMQContext()
            let socket = try ZMQSocket(context: context, type: .dealer)
            try socket.set([
                .linger(milliseconds: 0), .sendHighWaterMark(10), .receiveHighWaterMark(10),
                .routingID(Array("me".utf8)), .maxMessageSize(1024), .reconnectInterval(milliseconds: 100),
                .reconnectIntervalMax(milliseconds: 1000), .handshakeInterval(milliseconds: 5000),
                .immediate(false), .heartbeatInterval(milliseconds: 1000), .heartbeatTimeout(milliseconds: 3000),
            ])
            let error = #expect(throws: ZMQError.self) { try socket.set(.curvePublicKey([1, 2, 3])) }
            #expect(error?.operation == "zmq_setsockopt(ZMQ_CURVE_PUBLICKEY)")
        }
    }

    @Test func monitorReportsAcceptedAndDisconnected() async throws {
        let kinds = try await onThread { () -> [ZMQMonitorEvent.Kind] in
            let context = try ZMQContext()
            let router = try ZMQSocket(context: context, type: .router)
            let monitorEndpoint = "inproc://monitor-\(UUID().uuidString)"
            try router.startMonitor(endpoint: monitorEndpoint, events: [.accepted, .disconnected])
            let pair = try ZMQSocket(context: context, type: .pair)
            try pair.connect(monitorEndpoint)
            try router.bind("tcp://127.0.0.1:*")
            let dealer = try ZMQSocket(context: context, type: .dealer)
            try dealer.connect(router.lastEndpoint)
            try dealer.send([[1]])
            _ = try router.receive()
            dealer.close()
            var kinds: [ZMQMonitorEvent.Kind] = []
            while kinds.count < 2, let message = try pair.receive() {
                if let event = ZMQMonitorEvent(message: message) { kinds.append(event.kind) }
            }
            return kinds
        }
        #expect(kinds == [.accepted, .disconnected])
    }

    @Test func capabilities() {
        #expect(ZMQContext.version.hasPrefix("4."))
        #expect(ZMQContext.has("curve"))
    }
}
