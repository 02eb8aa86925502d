import SkyWire
import Testing

/// Received messages written into the buffers of messages the handler is done with: the
/// bytes read back are the new message's, a message still held keeps its own, and the pool
/// keeps no more buffers, and none larger, than it says.
@Suite("Frame buffer pool: received messages written into buffers used before")
struct FrameBufferPoolTests {
    /// A message of `frames`, copied as the I/O thread copies a received one, through `pool`.
    static func received(_ frames: [[UInt8]], pool: inout FrameBufferPool?) -> Frames {
        let small = frames.reduce(0) { $0 + Frames.inlineSize($1.count) }
        // All frames in one array, lent by their ranges, as libzmq lends its messages.
        let flat = frames.flatMap { $0 }
        var ranges: [Range<Int>] = []
        for frame in frames {
            ranges.append((ranges.last?.upperBound ?? 0)..<(ranges.last?.upperBound ?? 0) + frame.count)
        }
        return flat.withUnsafeBytes { raw in
            Frames(copying: frames.count, smallBytes: small, pool: &pool) { index in
                UnsafeRawBufferPointer(rebasing: raw[ranges[index]])
            }
        }
    }

    /// Messages of other sizes and frame counts, each written into the buffer of the one
    /// before: each reads back whole (shorter, longer, with a large frame, with none).
    @Test func aMessageWrittenIntoAUsedBufferReadsBackWhole() {
        var pool: FrameBufferPool? = FrameBufferPool()
        let messages: [[[UInt8]]] = [
            [[1, 2, 3], Array(repeating: 7, count: 64)],
            [[9]],
            [[4, 4], [], Array(repeating: 5, count: 200), [6]],
            [[8], Array(repeating: 3, count: 1500), [2, 2]],
            [[1, 2, 3], Array(repeating: 7, count: 64)],
        ]
        for message in messages {
            let frames = Self.received(message, pool: &pool)
            #expect(frames.arrays == message)
            #expect(frames.byteCount == message.reduce(0) { $0 + $1.count })
            pool!.reclaim()
            #expect(pool!.spareCount == 1, "the message's buffer is spare once the handler is done")
        }
    }

    /// A message the handler kept (a broker keeps one it could not deliver, or a view of its
    /// body) is not written over when its buffer is used again: the array is copied on write.
    @Test func aMessageStillHeldKeepsItsBytesWhenItsBufferIsUsedAgain() {
        var pool: FrameBufferPool? = FrameBufferPool()
        let kept = Self.received([[1, 1, 1], [2, 2, 2, 2]], pool: &pool)
        let body = kept[1]
        pool!.reclaim()
        let next = Self.received([[9, 9, 9], [8, 8, 8, 8]], pool: &pool)
        #expect(next.arrays == [[9, 9, 9], [8, 8, 8, 8]])
        #expect(kept.arrays == [[1, 1, 1], [2, 2, 2, 2]])
        #expect(Array(body) == [2, 2, 2, 2])
    }

    /// At most `most` buffers are kept, and none of a message larger than `largestBuffer`.
    @Test func thePoolKeepsAtMostItsCountAndNoLargeBuffer() {
        var pool: FrameBufferPool? = FrameBufferPool()
        var held: [Frames] = []
        for index in 0..<(FrameBufferPool.most + 10) {
            held.append(Self.received([[UInt8(truncatingIfNeeded: index)]], pool: &pool))
        }
        pool!.reclaim()
        #expect(pool!.spareCount == FrameBufferPool.most)
        var fresh: FrameBufferPool? = FrameBufferPool()
        let large = (0..<4).map { _ in [UInt8](repeating: 1, count: FrameBufferPool.largestBuffer / 3) }
        _ = Self.received(large, pool: &fresh)
        fresh!.reclaim()
        #expect(fresh!.spareCount == 0)
        #expect(held.count == FrameBufferPool.most + 10)
    }
}
