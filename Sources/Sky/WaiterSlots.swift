/// Suspended callers' continuations, each in a slot found by its waiter number: a call visits
/// its entry three times (parked, checked by the I/O thread, taken to be resumed), and a
/// dictionary of waiter numbers hashed on each visit.
///
/// A waiter number is the slot's index in the low 32 bits and how often the slot was taken in
/// the next 31, with the top bit set, so it is never one of the shell's counted numbers for
/// other waiters. A number whose slot was freed and taken again no longer matches it: a late
/// visit with it finds nothing.
struct WaiterSlots<Continuation: Sendable>: Sendable {
    typealias WaiterID = RequestTable.WaiterID

    private struct Slot: Sendable {
        var use: UInt32 = 0
        var taken = false
        var continuation: Continuation?
    }

    private var slots: [Slot] = []
    private var free: [UInt32] = []
    /// Slots taken (reserved or holding a continuation).
    private(set) var count = 0

    init(room: Int) {
        slots.reserveCapacity(room)
        free.reserveCapacity(room)
    }

    /// Takes a slot for a new caller, filled once its continuation exists.
    mutating func reserve() -> WaiterID {
        let index: Int
        if let reused = free.popLast() {
            index = Int(reused)
        } else {
            precondition(slots.count < Int(UInt32.max), "more than 2^32 callers waiting at once")
            index = slots.count
            slots.append(Slot())
        }
        slots[index].use &+= 1
        slots[index].taken = true
        count += 1
        return 1 << 63 | UInt64(slots[index].use & 0x7fff_ffff) << 32 | UInt64(index)
    }

    /// Takes a slot and puts `continuation` in it at once (a waiter that exists before its call
    /// starts: a completion handler).
    mutating func insert(_ continuation: consuming Continuation) -> WaiterID {
        let waiter = reserve()
        slots[Int(waiter & 0xffff_ffff)].continuation = consume continuation
        return waiter
    }

    /// Puts the caller's continuation in its slot; `false` when the slot was freed meanwhile
    /// (the caller was cancelled, or every waiter was taken at the close).
    mutating func fill(_ waiter: WaiterID, with continuation: consuming Continuation) -> Bool {
        guard let index = self.index(of: waiter) else { return false }
        slots[index].continuation = consume continuation
        return true
    }

    /// Whether the caller still waits.
    func contains(_ waiter: WaiterID) -> Bool { index(of: waiter) != nil }

    /// Frees the caller's slot; its continuation, for the caller to resume, if it had one.
    mutating func remove(_ waiter: WaiterID) -> Continuation? {
        guard let index = self.index(of: waiter) else { return nil }
        return release(index)
    }

    /// Frees every slot; the continuations they held.
    mutating func removeAll() -> [Continuation] {
        var taken: [Continuation] = []
        for index in slots.indices where slots[index].taken {
            if let continuation = release(index) { taken.append(continuation) }
        }
        return taken
    }

    private mutating func release(_ index: Int) -> Continuation? {
        // Taken out, not copied out and then cleared (its closure's references counted twice).
        let continuation = slots[index].continuation.take()
        slots[index].taken = false
        free.append(UInt32(index))
        count -= 1
        return continuation
    }

    private func index(of waiter: WaiterID) -> Int? {
        guard waiter >> 63 == 1 else { return nil }
        let index = Int(waiter & 0xffff_ffff)
        guard index < slots.count, slots[index].taken,
            UInt64(slots[index].use & 0x7fff_ffff) == (waiter >> 32) & 0x7fff_ffff
        else { return nil }
        return index
    }
}
