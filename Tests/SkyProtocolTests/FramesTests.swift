import SkyWire
import Testing

@testable import SkyProtocol

/// A message's frames in one buffer: views of it, the routing id dropped without a copy, and
/// the writer that builds the hot messages.
@Suite("Frames: a multipart message in one buffer")
struct FramesTests {
    static let arrays: [[UInt8]] = [
        [0, 1, 2, 3, 4], Array("SKYC01".utf8), [], [0x01], Array(repeating: 0xee, count: 300),
    ]

    /// A packed header is one frame: signature, command, request id, then the fields in the
    /// order written, big-endian, exactly as many bytes as written.
    @Test func aPackedHeaderIsOneFrameOfItsFieldsInOrder() {
        var writer = Frames.Writer(frames: 3, bytes: 64)
        writer.append([9])
        writer.appendPacked(Array("SKYX02".utf8), command: 7, RequestID(high: 1, low: 2), fieldBytes: 20) { fields in
            fields.bigEndian(UInt32(0x0102_0304))
            fields.byte(0xAA)
            fields.bytes([0xB0, 0xB1])
            fields.utf8("é!")
        }
        writer.append([5, 6])
        let frames = writer.finish()
        #expect(frames.count == 3)
        #expect(Array(frames[0]) == [9] && Array(frames[2]) == [5, 6])
        let expected: [UInt8] =
            Array("SKYX02".utf8) + [7] + [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]
            + [1, 2, 3, 4, 0xAA, 0xB0, 0xB1, 0xC3, 0xA9, 0x21]
        #expect(Array(frames[1]) == expected)
    }

    @Test func framesKeepTheirBoundariesAndBytes() {
        let frames = Frames(Self.arrays)
        #expect(frames.count == 5)
        #expect(frames.byteCount == 5 + 6 + 0 + 1 + 300)
        for index in 0..<5 { #expect(Array(frames[index]) == Self.arrays[index]) }
        #expect(frames[2].isEmpty)
        #expect(frames.arrays == Self.arrays)
    }

    @Test func droppingTheRoutingIDSharesTheBufferAndCountsOnlyWhatIsShown() {
        let frames = Frames(Self.arrays)
        let rest = frames.dropFirst()
        #expect(rest.count == 4)
        #expect(rest.byteCount == 6 + 0 + 1 + 300)
        #expect(Array(rest[0]) == Array("SKYC01".utf8))
        #expect(rest.arrays == Array(Self.arrays.dropFirst()))
        // A view of the same storage: the slice's indices are the buffer's, past the first frame.
        #expect(rest[0].startIndex == frames[1].startIndex)
        #expect(rest == Frames(Array(Self.arrays.dropFirst())))
        let none = Frames([[7]]).dropFirst().dropFirst()
        #expect(none.isEmpty && none.byteCount == 0 && none.arrays.isEmpty)
    }

    /// The broker reads a ROUTER's routing id in place and hides it: the same bytes, and the
    /// same frames after it, as a view and ``Frames/dropFirst()`` give.
    @Test func aFrameLentInPlaceAndTheFirstHiddenInPlaceMatchTheirViews() {
        var frames = Frames(Self.arrays + [Array(repeating: 0x5a, count: Frames.largeFrame)])
        for index in 0..<frames.count {
            #expect(frames.withFrame(index) { Array($0) } == Array(frames[index]), "frame \(index)")
        }
        let dropped = frames.dropFirst()
        frames.removeFirst()
        #expect(frames == dropped && frames.count == Self.arrays.count)
        #expect(frames.withFrame(0) { Array($0) } == Array("SKYC01".utf8))
        #expect(frames.withFrame(frames.count - 1) { $0.count } == Frames.largeFrame)
        var last = Frames([[7]])
        last.removeFirst()
        last.removeFirst()
        #expect(last.isEmpty)
    }

    /// A message's body is taken as an array of its own: a small frame's bytes, and a large
    /// frame's own array, shared rather than copied (a copy of a large body would cost a
    /// megabyte's copy for a megabyte's task).
    @Test func aFrameTakenAsAnArrayHasItsBytesAndALargeOneIsNotCopied() {
        let large = [UInt8](repeating: 0x5a, count: Frames.largeFrame)
        let frames = Frames(Self.arrays + [large]).dropFirst()
        let wrong = (0..<frames.count).filter { frames.array($0) != Array(frames[$0]) }
        #expect(wrong.count == 0, "frames \(wrong)")
        let taken = frames.array(frames.count - 1)
        let shared = taken.withUnsafeBufferPointer { mine in
            frames[frames.count - 1].withUnsafeBufferPointer { $0.baseAddress == mine.baseAddress }
        }
        #expect(shared)
    }

    @Test func aCopyOutlivesTheValueItCameFromAndChangesNothingInIt() {
        var copy: Frames?
        do {
            let frames = Frames(Self.arrays)
            copy = frames.dropFirst()
        }
        #expect(copy?.arrays == Array(Self.arrays.dropFirst()))
    }

    @Test func forEachFrameVisitsEachFrameOnceInOrderAndStopsWhenAsked() {
        let frames = Frames(Self.arrays).dropFirst()
        var seen: [[UInt8]] = []
        var lasts: [Bool] = []
        frames.forEachFrame { bytes, isLast in
            seen.append(Array(bytes))
            lasts.append(isLast)
            return true
        }
        #expect(seen == Array(Self.arrays.dropFirst()))
        #expect(lasts == [false, false, false, true])
        var visits = 0
        frames.forEachFrame { _, _ in
            visits += 1
            return visits < 2
        }
        #expect(visits == 2)
    }

    @Test func theWriterWritesNumbersBigEndianAndIdsAsTheirFrame() {
        var writer = Frames.Writer(frames: 5, bytes: 0)
        writer.append(bigEndian: UInt32(0x0102_0304))
        writer.append(bigEndian: 5, 6, 7)
        writer.append(bigEndian: UInt64(0x0102_0304_0506_0708))
        writer.append(RequestID(high: 1, low: 2))
        writer.append(utf8: "sky.é")
        let frames = writer.finish()
        #expect(Array(frames[0]) == [1, 2, 3, 4])
        #expect(Array(frames[1]) == [0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 7])
        #expect(Array(frames[2]) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(Array(frames[3]) == RequestID(high: 1, low: 2).frame)
        #expect(Array(frames[4]) == Array("sky.é".utf8))
    }

    /// A big task or result is kept by reference: written without a copy, and decoded back to
    /// the very same array, so a message of 1 MiB costs no more copies than libzmq's own.
    @Test func largeFramesAreKeptByReferenceNotCopied() throws {
        let body = [UInt8](repeating: 0x42, count: Frames.largeFrame)
        let small = [UInt8](repeating: 0x43, count: Frames.largeFrame - 1)
        let frames = Frames([[1], body, small, body, []])
        #expect(frames.arrays == [[1], body, small, body, []])
        #expect(frames.byteCount == 1 + 2 * body.count + small.count)
        func address(_ bytes: [UInt8]) -> UInt? {
            bytes.withUnsafeBufferPointer { $0.baseAddress.map { UInt(bitPattern: $0) } }
        }
        #expect(address(Array(frames[1])) == address(body))
        #expect(address(Array(frames[3])) == address(body))
        #expect(address(Array(frames[2])) != address(small))
        #expect(frames.dropFirst().dropFirst().dropFirst().arrays == [body, []])
        var sizes: [Int] = []
        frames.forEachFrame { bytes, _ in
            sizes.append(bytes.count)
            return true
        }
        #expect(sizes == [1, body.count, small.count, body.count, 0])

        let request = TaskRequest(
            requestID: RequestID(high: 1, low: 2), service: "s", header: RequestHeader(), body: body)
        guard case .request(let decoded) = try ClientToBroker.decode(ClientToBroker.request(request).frames()) else {
            Issue.record("not a request")
            return
        }
        #expect(address(decoded.body) == address(body))
    }

    /// How a received message is stored: copied in one pass from memory the caller owns. It must
    /// equal the frames built from arrays, keep large frames apart, and be independent of the
    /// memory it was copied from.

    /// A worker's REPLY, which the broker forwards at once, is decoded as a view of the received
    /// buffer (packed and framed), not copied out into an array of its own; a reply made from an
    /// array gives that array back, not a copy.
    @Test func aDecodedReplysBodyIsAViewOfTheReceivedBuffer() throws {
        func address(_ bytes: ArraySlice<UInt8>) -> UInt? {
            bytes.withUnsafeBufferPointer { $0.baseAddress.map { UInt(bitPattern: $0) } }
        }
        let body = Array("{\"echo\":\"sixty-four bytes of result, well under a large frame\"}".utf8)
        let reply = TaskReply(requestID: RequestID(high: 3, low: 4), status: .ok, body: body)
        let tag = DeliveryTag(number: 9)
        // The body is the packed form's frame 1 and the framed form's frame 5.
        for (sent, bodyFrame) in [(WorkerToBroker.packedReply(tag: tag, reply), 1), (.reply(tag: tag, reply), 5)] {
            let received = sent.frames()
            let answer: TaskReply
            switch try WorkerToBroker.decode(received) {
            case .packedReply(_, let decoded), .reply(_, let decoded): answer = decoded
            default:
                Issue.record("not a reply")
                continue
            }
            #expect(answer == reply)
            #expect(address(answer.bodyBytes) == address(received[bodyFrame]))
        }
        #expect(address(reply.body[...]) == address(body[...]))
    }
    @Test(arguments: ["no frame", "one empty frame", "three empty frames", "mixed", "large and small"])
    func framesCopiedInOnePassEqualTheSameFramesBuiltFromArrays(_ shape: String) {
        let arrays: [[UInt8]] =
            switch shape {
            case "no frame": []
            case "one empty frame": [[]]
            case "three empty frames": [[], [], []]
            case "mixed": Self.arrays
            default:
                [
                    [1], [UInt8](repeating: 7, count: Frames.largeFrame), [2, 3],
                    [UInt8](repeating: 8, count: Frames.largeFrame - 1),
                ]
            }
        let sources = arrays.map { bytes -> UnsafeMutableRawBufferPointer in
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
            buffer.copyBytes(from: bytes)
            return UnsafeMutableRawBufferPointer(rebasing: buffer[0..<bytes.count])
        }
        defer { for source in sources { source.deallocate() } }
        var asked: [Int] = []
        let frames = Frames(
            copying: arrays.count, smallBytes: arrays.reduce(0) { $0 + Frames.inlineSize($1.count) }
        ) { index in
            asked.append(index)
            return UnsafeRawBufferPointer(sources[index])
        }
        #expect(asked == Array(arrays.indices))
        // Scribbled over after the copy: the frames keep what was there.
        for index in sources.indices { sources[index].initializeMemory(as: UInt8.self, repeating: 0xff) }
        #expect(frames == Frames(arrays))
        #expect(frames.arrays == arrays)
        #expect(frames.byteCount == arrays.reduce(0) { $0 + $1.count })
        #expect(frames.dropFirst().arrays == Array(arrays.dropFirst()))
    }

    @Test func equalityIsByFramesNotByStorage() {
        #expect(Frames([[1], [2, 3]]) == Frames([[0], [1], [2, 3]]).dropFirst())
        #expect(Frames([[1], [2, 3]]) != Frames([[1, 2], [3]]))
        #expect(Frames([[1]]) != Frames([[1], []]))
    }
}
