import SkyWire
import Testing

/// The timer queue of the broker's deadlines and leases and the client's calls: in-order
/// inserts take the sorted run, the rest a heap, and the two together give what one heap would.
@Suite("Expiry queue")
struct ExpiryQueueTests {
    @Test func itGivesTheSameOrderAsSortingWhateverOrderEntriesCameIn() {
        var generator = SystemRandomNumberGenerator()
        for round in 0..<50 {
            var queue = ExpiryQueue<Int>()
            var expected: [Int] = []
            var taken: [Int] = []
            var clock = 0
            for step in 0..<2000 {
                // Mostly later than everything so far (a fixed timeout from now), sometimes
                // earlier (a shorter timeout, a backoff), with removals between.
                clock += Int.random(in: 0...3, using: &generator)
                let value =
                    Int.random(in: 0..<10, using: &generator) < 8
                    ? clock + 100 : clock + Int.random(in: 0...99, using: &generator)
                queue.insert(value)
                expected.append(value)
                if step % 3 == round % 3, let first = queue.removeMin() {
                    let smallest = expected.min()!
                    #expect(first == smallest)
                    expected.remove(at: expected.firstIndex(of: smallest)!)
                    taken.append(first)
                }
                #expect(queue.count == expected.count)
                #expect(queue.min == expected.min())
            }
            while let next = queue.removeMin() { taken.append(next) }
            #expect(queue.isEmpty)
            #expect(taken.count == 2000)
        }
    }

    @Test func removeAllKeepsTheRestInOrderAndCountsThem() {
        var queue = ExpiryQueue<Int>()
        for value in 0..<3000 { queue.insert(value) }
        for value in [5, 17, 2999] { queue.insert(value) }  // out of order: the heap beside the run
        for _ in 0..<1500 { queue.removeMin() }  // past the point where left entries are dropped
        queue.removeAll { $0 % 2 == 0 }
        #expect(queue.count == queue.unordered.count)
        #expect(queue.unordered.allSatisfy { $0 % 2 == 1 })
        var previous = Int.min
        while let next = queue.removeMin() {
            #expect(next >= previous)
            previous = next
        }
    }

    @Test func aQueueMadeFromEntriesInAnyOrderGivesThemSorted() {
        var queue = ExpiryQueue([5, 3, 9, 1, 7])
        var out: [Int] = []
        while let next = queue.removeMin() { out.append(next) }
        #expect(out == [1, 3, 5, 7, 9])
    }
}
