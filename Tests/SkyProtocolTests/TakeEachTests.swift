import SkyWire
import Testing

@testable import SkyProtocol

/// `takeEach`: the I/O loops hand each element of a batch on without copying it.
@Suite("Array.takeEach")
struct TakeEachTests {
    final class Box {
        let value: Int
        init(_ value: Int) { self.value = value }
    }

    @Test func handsOnEachElementInOrderAndLeavesThePlaceholder() {
        var values = [3, 1, 4, 1, 5]
        var seen: [Int] = []
        values.takeEach(leaving: 0) { seen.append($0) }
        #expect(seen == [3, 1, 4, 1, 5])
        #expect(values == [0, 0, 0, 0, 0])
    }

    /// The element is moved, not copied: inside the body it is the only reference left.
    @Test func anElementReachesTheBodyAsItsOnlyReference() {
        var boxes: [Box?] = [Box(1), Box(2)]
        var unique: [Bool] = []
        boxes.takeEach(leaving: nil) { (element: consuming Box?) in
            var mine = consume element
            unique.append(isKnownUniquelyReferenced(&mine))
        }
        #expect(unique == [true, true])
        #expect(boxes.allSatisfy { $0 == nil })
    }

    /// The loops empty their lists this way between wake-ups: every element goes (each
    /// destroyed), the buffer stays for the next batch.
    @Test func removingAllKeepsTheBufferAndDestroysEachElement() {
        weak var first: Box?
        weak var last: Box?
        var boxes: [Box] = []
        do {
            let made = (0..<64).map(Box.init)
            first = made.first
            last = made.last
            boxes = made
        }
        let capacity = boxes.capacity
        #expect(first != nil && last != nil)
        boxes.removeAllKeepingBuffer()
        #expect(boxes.isEmpty)
        #expect(boxes.capacity == capacity, "the buffer is kept")
        #expect(first == nil && last == nil, "each element was destroyed")
        var empty: [Box] = []
        empty.removeAllKeepingBuffer()
        #expect(empty.isEmpty)
    }
}
