import SkyWire
import Testing

@testable import SkyProtocol

/// The hot messages sent from their parts (``FrameParts``) are byte for byte the messages built
/// in one buffer (``Frames``), which the codec tests check against docs/protocol.md: with and
/// without a routing id and a trace frame, for empty, small and large bodies, and when copied
/// to be kept.
@Suite("Protocol codec: messages sent from their parts")
struct FramePartsTests {
    static let id = RequestID(high: 0x0102_0304_0506_0708, low: 0x090a_0b0c_0d0e_0f10)
    static let tag: DeliveryTag = [0, 0, 0, 0, 0, 0, 0, 9]
    static let bodies: [[UInt8]] = [[], Array(#"{"sector":7}"#.utf8), [UInt8](repeating: 0x61, count: 2000)]
    static let routingIDs: [[UInt8]?] = [nil, [0, 1, 2, 3, 4], Array(100...115)]

    static func request(body: [UInt8], trace: [UInt8]?, service: String = "sky.scan") -> TaskRequest {
        TaskRequest(
            requestID: id, service: service,
            header: RequestHeader(
                attempt: 3, timeoutMilliseconds: 2500, noWorkersGraceMilliseconds: 700, priority: -5),
            body: body, trace: trace)
    }

    static func routed<R>(_ id: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let id else { return body(nil) }
        return id.withUnsafeBytes { body($0) }
    }

    /// The frames a command lends, as arrays; nil when it lends none.
    static func lent(_ lend: ((FrameParts) -> Void) -> Bool) -> [[UInt8]]? {
        var frames: [[UInt8]]?
        guard lend({ frames = $0.arrays }) else { return nil }
        return frames
    }

    @Test(arguments: bodies)
    func theHotMessagesAreTheSameFromTheirParts(body: [UInt8]) throws {
        for trace in [nil, Array("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".utf8)] {
            let request = Self.request(body: body, trace: trace)
            let client = ClientToBroker.packedRequest(request)
            #expect(Self.lent(client.lendParts) == client.frames().arrays)
            let reply = TaskReply(requestID: Self.id, attempt: 4, status: .handlerError, body: body)
            let worker = WorkerToBroker.packedReply(tag: Self.tag, reply)
            #expect(Self.lent(worker.lendParts) == worker.frames().arrays)
            for routingID in Self.routingIDs {
                let toWorker = BrokerToWorker.packedRequest(tag: Self.tag, request)
                let toClient = BrokerToClient.packedReply(reply)
                Self.routed(routingID) { id in
                    #expect(Self.lent { toWorker.lendParts(routedTo: id, $0) } == toWorker.frames(routedTo: id).arrays)
                    #expect(Self.lent { toClient.lendParts(routedTo: id, $0) } == toClient.frames(routedTo: id).arrays)
                }
            }
        }
    }

    /// A message kept to be sent later is copied out of the memory that lent it: the copy holds
    /// the same frames, small ones in its buffer and a large body as an array of its own.
    @Test(arguments: bodies)
    func aCopyOfLentPartsHoldsTheSameFrames(body: [UInt8]) {
        let request = Self.request(body: body, trace: [7, 7])
        for routingID in Self.routingIDs {
            Self.routed(routingID) { id in
                let command = BrokerToWorker.packedRequest(tag: Self.tag, request)
                var copy: Frames?
                #expect(command.lendParts(routedTo: id) { copy = Frames($0) })
                #expect(copy?.arrays == command.frames(routedTo: id).arrays)
                #expect(copy?.byteCount == command.frames(routedTo: id).byteCount)
            }
        }
    }

    /// A long service name (a head of hundreds of bytes) is lent from its parts too; the framed
    /// forms and the other commands lend none, and are built in one buffer.
    @Test func aLongHeadIsLentAndTheOtherCommandsAreNot() {
        let long = Self.request(body: [1, 2], trace: nil, service: String(repeating: "s", count: 2000))
        let client = ClientToBroker.packedRequest(long)
        #expect(Self.lent(client.lendParts) == client.frames().arrays)
        Self.routed(Self.routingIDs[2]) { id in
            let command = BrokerToWorker.packedRequest(tag: Self.tag, long)
            #expect(Self.lent { command.lendParts(routedTo: id, $0) } == command.frames(routedTo: id).arrays)
        }
        let request = Self.request(body: [1], trace: nil)
        #expect(Self.lent(ClientToBroker.request(request).lendParts) == nil)
        #expect(Self.lent { BrokerToWorker.request(tag: Self.tag, request).lendParts(routedTo: nil, $0) } == nil)
        let reply = BrokerToClient.reply(TaskReply(requestID: Self.id, status: .ok, body: []))
        #expect(Self.lent { reply.lendParts(routedTo: nil, $0) } == nil)
        #expect(Self.lent(WorkerToBroker.heartbeat.lendParts) == nil)
    }
}
