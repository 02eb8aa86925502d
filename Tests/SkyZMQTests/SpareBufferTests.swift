import SkyZMQ
import Testing

/// A shell's list of actions, kept from one wake-up to the next.
@Suite("Spare buffer")
struct SpareBufferTests {
    @Test func aBufferGivenBackComesBackEmptyWithItsCapacity() {
        let spare = SpareBuffer<Int>()
        var first = spare.take()
        #expect(first.isEmpty)
        first.append(contentsOf: 0..<100)
        spare.giveBack(&first)
        #expect(first.isEmpty, "the caller's buffer is left empty")
        let second = spare.take()
        #expect(second.isEmpty, "nothing of the earlier wake-up comes back")
        #expect(second.capacity >= 100, "the grown buffer is used again: no allocation")
        #expect(spare.take().capacity == 0, "a second take finds no buffer: it is not shared")
    }

    /// A burst's buffer is not kept: its memory goes back with it.
    @Test func aBufferThatOutgrewTheLimitIsFreedNotKept() {
        let spare = SpareBuffer<Int>(keptCapacity: 64)
        var small = spare.take()
        small.append(contentsOf: 0..<10)
        spare.giveBack(&small)
        var burst = spare.take()
        #expect(burst.capacity >= 10 && burst.capacity <= 64)
        burst.append(contentsOf: 0..<1000)
        spare.giveBack(&burst)
        #expect(burst.isEmpty)
        #expect(spare.take().capacity == 0, "the burst's buffer was freed, and the smaller one went with the take")
    }
}
