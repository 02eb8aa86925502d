import Testing

@testable import SkyProtocol

/// Delivery tags are opaque bytes to a worker: whatever their length (inline up to 16 bytes, in
/// an array beyond), they travel through both encodings and come back unchanged.
@Suite("Delivery tags")
struct DeliveryTagTests {
    static let request = TaskRequest(
        requestID: RequestID(high: 1, low: 2), service: "sky.scan", header: RequestHeader(attempt: 1), body: [7])

    @Test(arguments: [1, 5, 8, 15, 16, 17, 100, 255])
    func tagsOfEveryLengthTravelUnchanged(length: Int) throws {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 31 + 3) }
        let tag = DeliveryTag(bytes)
        #expect(tag.bytes.array == bytes && tag.count == length)
        #expect(tag.withBytes { Array($0) } == bytes)
        #expect(tag == DeliveryTag(bytes[...]) && tag.hashValue == DeliveryTag(bytes[...]).hashValue)
        #expect(tag != DeliveryTag(bytes + [0]))
        for command in [BrokerToWorker.request(tag: tag, Self.request), .packedRequest(tag: tag, Self.request)] {
            switch try BrokerToWorker.decode(command.encode()) {
            case .request(let decoded, _), .packedRequest(let decoded, _): #expect(decoded == tag)
            default: Issue.record("\(command) did not decode as a request")
            }
        }
        let reply = TaskReply(requestID: Self.request.requestID, status: .ok, body: [1])
        for command in [WorkerToBroker.reply(tag: tag, reply), .packedReply(tag: tag, reply)] {
            switch try WorkerToBroker.decode(command.encode()) {
            case .reply(let decoded, _), .packedReply(let decoded, _): #expect(decoded == tag)
            default: Issue.record("\(command) did not decode as a reply")
            }
        }
    }

    @Test func theBrokerWritesItsDeliveryNumberBigEndian() {
        let tag = DeliveryTag(number: 0x0102_0304_0506_0708)
        #expect(tag.bytes.array == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(tag.number == 0x0102_0304_0506_0708)
        #expect(DeliveryTag([1, 2, 3]).number == nil, "another broker's tag names no number")
        #expect(DeliveryTag([UInt8](repeating: 9, count: 9)).number == nil)
        #expect(DeliveryTag(number: 5) == [0, 0, 0, 0, 0, 0, 0, 5])
    }
}
