import SkyWire
import Testing

@testable import SkyProtocol

/// The hot paths' byte arrays: the same bytes whether written on the stack first or straight
/// into the array.
@Suite("ByteArray: arrays written without the generic slow path")
struct ByteArrayTests {
    @Test(arguments: [0, 1, 8, ByteArray.stackLimit, ByteArray.stackLimit + 1, 70_000])
    func anArrayHoldsExactlyWhatWasWritten(capacity: Int) {
        let written = capacity / 2 + capacity % 2
        let bytes = ByteArray.written(capacity: capacity) { buffer in
            #expect(buffer.count >= capacity)
            for index in 0..<written { buffer[index] = UInt8(truncatingIfNeeded: index &* 31) }
            return written
        }
        #expect(bytes == (0..<written).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    }

    @Test(arguments: [(0, 0), (16, 104), (0, 200), (5_000, 2_000)])
    func aReservedArrayStartsWithItsZeroesAndHasRoomForTheRest(zeroes: Int, capacity: Int) {
        var bytes = ByteArray.reserved(capacity, zeroes: zeroes)
        #expect(bytes == [UInt8](repeating: 0, count: zeroes))
        #expect(bytes.capacity >= max(capacity, zeroes))
        let storage = bytes.withUnsafeBufferPointer { $0.baseAddress }
        bytes.append(contentsOf: repeatElement(7, count: max(0, capacity - zeroes)))
        // No regrowth while filling what was reserved.
        #expect(bytes.withUnsafeBufferPointer { $0.baseAddress } == storage || bytes.isEmpty)
    }
}
