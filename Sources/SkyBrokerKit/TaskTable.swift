import SkyProtocol

extension BrokerStateMachine {
    /// Where each accepted, unanswered request is, by its key: an open-addressed table that
    /// finds a key's slot from the hash the key carries (``TaskKey/hash``), computed once when
    /// the request arrives and again when it leaves the queue; its delivery keeps it for the
    /// reply (``InFlightTask/key``).
    ///
    /// Swift's `Dictionary` runs its hasher over the key on every access, and a request is looked
    /// up four times (accepted, queued, dispatched, answered); it has no way to take a hash
    /// computed before, hence this table (docs/performance.md, "What is left"). The hash is the
    /// request id mixed under a seed random for each process (`RequestID.mixed(with:)`), so a
    /// client that chooses its request ids cannot aim them at one slot.
    ///
    /// Linear probing at a load of at most three quarters, as the dictionary's, in slots as
    /// small as the dictionary's key and value: a queued request costs the same memory. A
    /// removal shifts the entries after it back (no tombstones), so a long run of inserts and
    /// removals leaves no debris.
    struct TaskTable: Sendable {
        private struct Entry: Sendable {
            var client: ClientNumber
            /// The key's hash, 32 bits of it with the top one set; 0 in an empty slot.
            var mark: UInt32
            var requestID: RequestID
            var place: TaskPlace

            static let empty = Entry(client: 0, mark: 0, requestID: RequestID(high: 0, low: 0), place: .vacant)
        }

        private var entries: [Entry]
        private var mask: Int
        /// Requests in the table.
        private(set) var count = 0

        /// - Parameter minimumCapacity: requests it holds before it first grows.
        init(minimumCapacity: Int) {
            var slots = 8
            while 3 * slots < 4 * minimumCapacity { slots *= 2 }
            entries = Array(repeating: .empty, count: slots)
            mask = slots - 1
        }

        /// Slots, used or not (for tests of growth and of the storage given back).
        var capacity: Int { entries.count }

        subscript(key: TaskKey) -> TaskPlace? {
            get {
                guard let slot = slot(of: key) else { return nil }
                return entries[slot].place
            }
            set {
                if let place = newValue { insert(key, place) } else { remove(key) }
            }
        }

        mutating func removeAll() {
            for index in entries.indices { entries[index] = .empty }
            count = 0
        }

        /// The same requests in a table of the size they need (at least `minimumCapacity`):
        /// what a large queue made it grow to goes back.
        func resized(minimumCapacity: Int) -> TaskTable {
            var fresh = TaskTable(minimumCapacity: max(count, minimumCapacity))
            for entry in entries where entry.mark != 0 { fresh.put(entry) }
            fresh.count = count
            return fresh
        }

        private static func mark(_ key: TaskKey) -> UInt32 { UInt32(truncatingIfNeeded: key.hash) | 1 << 31 }

        private func slot(of key: TaskKey) -> Int? {
            let mark = Self.mark(key)
            var index = Int(mark) & mask
            while entries[index].mark != 0 {
                if entries[index].mark == mark && entries[index].client == key.client
                    && entries[index].requestID == key.requestID
                {
                    return index
                }
                index = (index + 1) & mask
            }
            return nil
        }

        private mutating func insert(_ key: TaskKey, _ place: TaskPlace) {
            if let slot = slot(of: key) {
                entries[slot].place = place
                return
            }
            put(Entry(client: key.client, mark: Self.mark(key), requestID: key.requestID, place: place))
            count += 1
            if 4 * count > 3 * entries.count { self = resized(minimumCapacity: entries.count) }
        }

        /// Puts an entry whose key is not in the table into the first free slot of its run.
        private mutating func put(_ entry: Entry) {
            var index = Int(entry.mark) & mask
            while entries[index].mark != 0 { index = (index + 1) & mask }
            entries[index] = entry
        }

        private mutating func remove(_ key: TaskKey) {
            guard var hole = slot(of: key) else { return }
            entries[hole] = .empty
            count -= 1
            // Backward shift: each entry after the hole, up to the next empty slot, moves into the
            // hole unless its own home slot lies cyclically after the hole (it would then no
            // longer be found from there).
            var index = (hole + 1) & mask
            while entries[index].mark != 0 {
                let home = Int(entries[index].mark) & mask
                if (index - home) & mask >= (index - hole) & mask {
                    entries[hole] = entries[index]
                    entries[index] = .empty
                    hole = index
                }
                index = (index + 1) & mask
            }
        }
    }
}
