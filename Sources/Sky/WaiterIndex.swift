import SkyProtocol

/// The call each waiter waits for, found by the waiter number's slot index (its low 32 bits,
/// ``WaiterSlots``) without hashing: a dictionary of waiter numbers hashed the number at each
/// call's start and end, which showed in the client's profile (docs/performance-history.md).
///
/// A number whose index is beyond ``directLimit``, or whose place holds another live waiter
/// (numbers not made by ``WaiterSlots``, as tests' are), goes to a dictionary instead.
struct WaiterIndex {
    typealias WaiterID = RequestTable.WaiterID

    private struct Entry {
        var waiter: WaiterID
        var call: RequestID
    }

    /// Indexes up to this are kept in the array; ``WaiterSlots`` takes freed slots again
    /// first, so indexes stay below the most callers that waited at once.
    static let directLimit = 1 << 20

    private var direct: [Entry?]
    private var others: [WaiterID: RequestID] = [:]
    private(set) var count = 0

    init(room: Int) {
        direct = []
        direct.reserveCapacity(room)
    }

    /// Waiters held before the array grows.
    var capacity: Int { direct.capacity }

    private static func index(_ waiter: WaiterID) -> Int { Int(truncatingIfNeeded: waiter & 0xffff_ffff) }

    subscript(waiter: WaiterID) -> RequestID? {
        get {
            let index = Self.index(waiter)
            if index < direct.count, let entry = direct[index], entry.waiter == waiter { return entry.call }
            return others.isEmpty ? nil : others[waiter]
        }
        set {
            guard let call = newValue else {
                removeValue(forKey: waiter)
                return
            }
            let index = Self.index(waiter)
            if index < Self.directLimit {
                while direct.count <= index { direct.append(nil) }
                switch direct[index] {
                case nil:
                    direct[index] = Entry(waiter: waiter, call: call)
                    count += 1
                    return
                case let entry? where entry.waiter == waiter:
                    direct[index]!.call = call
                    return
                default:
                    break
                }
            }
            if others.updateValue(call, forKey: waiter) == nil { count += 1 }
        }
    }

    @discardableResult
    mutating func removeValue(forKey waiter: WaiterID) -> RequestID? {
        let index = Self.index(waiter)
        if index < direct.count, let entry = direct[index], entry.waiter == waiter {
            direct[index] = nil
            count -= 1
            return entry.call
        }
        guard !others.isEmpty, let call = others.removeValue(forKey: waiter) else { return nil }
        count -= 1
        return call
    }
}
