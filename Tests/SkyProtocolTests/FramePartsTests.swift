import SkyWire
import Testing

@testable import SkyProtocol

/// The hot messages sent from their parts (``FrameParts``) are byte for byte the messages built
/// in one buffer (``Frames``), which the codec tests check against docs/protocol.md: with and
/// without a routing id and a trace frame, for empty, small and large bodies; and a head too
/// long to keep inline falls back to the buffer.
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

    @Test(arguments: bodies)
    func theHotMessagesAreTheSameFromTheirParts(body: [UInt8]) throws {
        for trace in [nil, Array("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".utf8)] {
            let request = Self.request(body: body, trace: trace)
            let client = ClientToBroker.packedRequest(request)
            #expect(try #require(client.parts()).arrays == client.frames().arrays)
            let reply = TaskReply(requestID: Self.id, attempt: 4, status: .handlerError, body: body)
            let worker = WorkerToBroker.packedReply(tag: Self.tag, reply)
            #expect(try #require(worker.parts()).arrays == worker.frames().arrays)
            for routingID in Self.routingIDs {
                let toWorker = BrokerToWorker.packedRequest(tag: Self.tag, request)
                let toClient = BrokerToClient.packedReply(reply)
                Self.routed(routingID) { id in
                    #expect(toWorker.parts(routedTo: id)?.arrays == toWorker.frames(routedTo: id).arrays)
                    #expect(toClient.parts(routedTo: id)?.arrays == toClient.frames(routedTo: id).arrays)
                }
            }
        }
    }

    /// A routing id and head over ``FrameParts/inlineCapacity`` (a long service name) has no
    /// parts: the sender builds it in one buffer; the framed forms have none either.
    @Test func aHeadTooLongToKeepInlineHasNoParts() {
        let long = Self.request(body: [1, 2], trace: nil, service: String(repeating: "s", count: 100))
        #expect(ClientToBroker.packedRequest(long).parts() == nil)
        #expect(
            Self.routed(Self.routingIDs[2]) { BrokerToWorker.packedRequest(tag: Self.tag, long).parts(routedTo: $0) }
                == nil)
        // Just within: a head that fills the inline bytes exactly.
        let head = WireFormat.packedClientSignature.count + 1 + RequestID.byteCount + 16
        let fits = Self.request(
            body: [1], trace: nil, service: String(repeating: "s", count: FrameParts.inlineCapacity - head))
        let client = ClientToBroker.packedRequest(fits)
        #expect(client.parts()?.arrays == client.frames().arrays)
        let request = Self.request(body: [1], trace: nil)
        #expect(ClientToBroker.request(request).parts() == nil)
        #expect(BrokerToWorker.request(tag: Self.tag, request).parts(routedTo: nil) == nil)
        #expect(BrokerToClient.reply(TaskReply(requestID: Self.id, status: .ok, body: [])).parts(routedTo: nil) == nil)
        #expect(WorkerToBroker.heartbeat.parts() == nil)
    }
}
