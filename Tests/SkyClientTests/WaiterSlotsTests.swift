import Testing

@testable import Sky

/// The shell's table of suspended callers: a slot per caller, found by its number without
/// hashing; a number outlives its slot's use only as a number that finds nothing.
@Suite("Waiter slots")
struct WaiterSlotsTests {
    @Test func aCallerIsReservedThenFilledThenTakenOnce() {
        var slots = WaiterSlots<String>(room: 4)
        let waiter = slots.reserve()
        #expect(slots.contains(waiter))
        #expect(slots.count == 1)
        let unfilled = slots.remove(waiter)
        #expect(unfilled == nil, "reserved, not filled: nothing to resume")
        #expect(!slots.contains(waiter))
        let second = slots.reserve()
        let filled = slots.fill(second, with: "second")
        let taken = slots.remove(second)
        let takenAgain = slots.remove(second)
        #expect(filled && taken == "second")
        #expect(takenAgain == nil, "taken once")
        #expect(slots.count == 0)
    }

    /// A cancellation that freed the slot before the caller filled it: the fill says so, and
    /// the continuation stays the caller's to resume.
    @Test func aFillAfterTheSlotWasFreedFails() {
        var slots = WaiterSlots<String>(room: 4)
        let waiter = slots.reserve()
        _ = slots.remove(waiter)
        let late = slots.fill(waiter, with: "late")
        #expect(!late)
        let reused = slots.reserve()
        let lateIntoReused = slots.fill(waiter, with: "late")
        #expect(!lateIntoReused, "its slot is another caller's now")
        #expect(slots.contains(reused))
        let reusedContent = slots.remove(reused)
        #expect(reusedContent == nil)
    }

    /// A freed slot is taken again under a new number; the old number finds nothing in it.
    @Test func aNumberDoesNotReachTheSlotsNextCaller() {
        var slots = WaiterSlots<Int>(room: 1)
        let first = slots.reserve()
        _ = slots.fill(first, with: 1)
        _ = slots.remove(first)
        let second = slots.reserve()
        #expect(second != first)
        #expect(second & 0xffff_ffff == first & 0xffff_ffff, "the same slot")
        let filled = slots.fill(second, with: 2)
        let byOldNumber = slots.remove(first)
        let byNewNumber = slots.remove(second)
        #expect(filled && !slots.contains(first))
        #expect(byOldNumber == nil && byNewNumber == 2)
    }

    /// Numbers from the shell's counter (other waiters) never find a slot.
    @Test func countedNumbersFindNothing() {
        var slots = WaiterSlots<Int>(room: 2)
        let waiter = slots.reserve()
        _ = slots.fill(waiter, with: 7)
        #expect(waiter >> 63 == 1)
        for counted: UInt64 in [0, 1, 2, waiter & ~(1 << 63)] {
            #expect(!slots.contains(counted))
            let found = slots.remove(counted)
            #expect(found == nil)
        }
        let taken = slots.remove(waiter)
        #expect(taken == 7)
    }

    /// The close takes every continuation once; reserved slots are freed, so their fill fails.
    @Test func removeAllTakesEveryContinuationAndFreesReservations() {
        var slots = WaiterSlots<Int>(room: 2)
        var filled: [RequestTable.WaiterID] = []
        for value in 0..<100 {
            let waiter = slots.reserve()
            _ = slots.fill(waiter, with: value)
            filled.append(waiter)
        }
        let reserved = slots.reserve()
        _ = slots.remove(filled[50])
        #expect(slots.count == 100)
        let taken = slots.removeAll()
        #expect(taken.sorted() == Array(0..<100).filter { $0 != 50 })
        #expect(slots.count == 0)
        let lateFill = slots.fill(reserved, with: 1)
        #expect(!lateFill)
        #expect(filled.allSatisfy { !slots.contains($0) })
        let takenAgain = slots.removeAll()
        #expect(takenAgain.isEmpty)
    }
}
