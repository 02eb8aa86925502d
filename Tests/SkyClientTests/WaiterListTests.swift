import Testing

@testable import Sky

/// The callers of one request: one inline, more (coalesced calls) in order after it; removing
/// any keeps the others in order, and lists with the same callers are equal however built.
@Suite("Waiter list")
struct WaiterListTests {
    @Test func oneWaiterIsTheOnlyOne() {
        let list = WaiterList(7)
        #expect(list.only == 7 && list.count == 1 && !list.isEmpty)
        #expect(Array(list) == [7])
        #expect(list == [7])
    }

    @Test func coalescedWaitersKeepTheirOrderAsAnyIsRemoved() {
        var list = WaiterList(1)
        list.append(2)
        list.append(3)
        #expect(Array(list) == [1, 2, 3] && list.count == 3 && list.only == nil)
        list.remove(2)
        #expect(Array(list) == [1, 3])
        list.remove(1)
        #expect(Array(list) == [3] && list.only == 3)
        #expect(list == WaiterList(3), "the same list, however it was built")
        list.remove(9)
        #expect(Array(list) == [3], "a waiter that is not there changes nothing")
        list.remove(3)
        #expect(list.isEmpty && list.count == 0 && list.only == nil && Array(list).isEmpty)
        list.append(4)
        #expect(Array(list) == [4] && list.only == 4)
        #expect(WaiterList(arrayLiteral: 5, 6) != [6, 5])
    }
}
