import SkyProtocol
import Testing

@testable import Sky

/// The call each waiter waits for, found by the waiter number's slot without hashing; numbers
/// whose slot is beyond the array or taken by another waiter go to a dictionary.
@Suite("Waiter index")
struct WaiterIndexTests {
    @Test func waitersOfTheSlotTableAreFoundAndRemovedOnce() {
        var index = WaiterIndex(room: 4)
        var slots = WaiterSlots<Int>(room: 4)
        let first = slots.reserve()
        let second = slots.reserve()
        index[first] = RequestID(high: 1, low: 1)
        index[second] = RequestID(high: 2, low: 2)
        #expect(index.count == 2)
        #expect(index[first] == RequestID(high: 1, low: 1))
        #expect(index.removeValue(forKey: first) == RequestID(high: 1, low: 1))
        #expect(index.removeValue(forKey: first) == nil)
        #expect(index[first] == nil)
        // The slot taken again: the old number finds nothing, the new one its call.
        _ = slots.remove(first)
        let again = slots.reserve()
        index[again] = RequestID(high: 3, low: 3)
        #expect(index[first] == nil)
        #expect(index[again] == RequestID(high: 3, low: 3))
        #expect(index.count == 2)
    }

    @Test func numbersSharingASlotOrBeyondTheArrayAreKeptApart() {
        var index = WaiterIndex(room: 4)
        let a: UInt64 = 7
        let b: UInt64 = 1 << 40 | 7  // the same slot as `a`
        let far: UInt64 = UInt64(WaiterIndex.directLimit) + 5
        index[a] = RequestID(high: 0, low: 1)
        index[b] = RequestID(high: 0, low: 2)
        index[far] = RequestID(high: 0, low: 3)
        #expect(index.count == 3)
        #expect(index[a] == RequestID(high: 0, low: 1))
        #expect(index[b] == RequestID(high: 0, low: 2))
        #expect(index[far] == RequestID(high: 0, low: 3))
        index[b] = nil
        #expect(index[b] == nil)
        #expect(index[a] == RequestID(high: 0, low: 1))
        #expect(index.removeValue(forKey: far) == RequestID(high: 0, low: 3))
        #expect(index.count == 1)
        index[a] = RequestID(high: 0, low: 9)
        #expect(index.count == 1, "a new value for a number held replaces it")
        #expect(index[a] == RequestID(high: 0, low: 9))
    }
}
