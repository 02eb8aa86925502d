import SkyProtocol
import SkyWire
import Testing

/// A reply's body travels without copies: the array it was made with is the one a client's
/// caller gets, and a reply the broker decodes from a worker's message views that message's
/// buffer (it forwards the body from there).
@Suite("TaskReply: the body shared, not copied")
struct TaskReplyBodyTests {
    static func address(_ bytes: some Collection<UInt8>) -> UnsafeRawPointer? {
        bytes.withContiguousStorageIfAvailable { UnsafeRawPointer($0.baseAddress) } ?? nil
    }

    @Test func aReplysBodyIsTheArrayItWasMadeWith() {
        let body = [UInt8](repeating: 7, count: 100)
        let reply = TaskReply(requestID: RequestID(high: 1, low: 2), status: .ok, body: body)
        #expect(reply.body == body)
        #expect(Self.address(reply.body) == Self.address(body))
        #expect(Self.address(reply.bodyBytes) == Self.address(body))
    }

    @Test(arguments: [true, false])
    func aDecodedWorkerReplyViewsTheMessagesBuffer(packed: Bool) throws {
        let body = [UInt8](repeating: 9, count: 64)
        let sent = TaskReply(requestID: RequestID(high: 3, low: 4), status: .ok, body: body)
        let tag = DeliveryTag(number: 12)
        let frames = (packed ? WorkerToBroker.packedReply(tag: tag, sent) : .reply(tag: tag, sent)).frames()
        let bodyFrame = frames.count - 1
        let reply: TaskReply
        switch try WorkerToBroker.decode(frames) {
        case .packedReply(_, let decoded), .reply(_, let decoded): reply = decoded
        default:
            Issue.record("not a reply")
            return
        }
        #expect(reply.bodyBytes.elementsEqual(body))
        #expect(Self.address(reply.bodyBytes) == frames.withFrame(bodyFrame) { $0.baseAddress })
        // Asked for as an array, a view of a larger buffer is copied out.
        #expect(reply.body == body)
    }

    /// A status this edition does not know still reads as `internalError`, its body saying so.
    @Test func anUnknownStatusStillReadsAsInternalError() throws {
        let sent = TaskReply(requestID: RequestID(high: 5, low: 6), status: .ok, body: Array("x".utf8))
        let tag = DeliveryTag(number: 1)
        var arrays = WorkerToBroker.reply(tag: tag, sent).encode()
        arrays[4] = [200]
        guard case .reply(_, let reply) = try WorkerToBroker.decode(Frames(arrays)) else {
            Issue.record("not a reply")
            return
        }
        #expect(reply.status == .internalError)
        #expect(String(decoding: reply.body, as: UTF8.self).contains("status 200"))
    }
}
