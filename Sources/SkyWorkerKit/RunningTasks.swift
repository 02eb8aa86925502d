/// The tasks a worker runs, by key, each with its slot: an open-addressing table with linear
/// probing, at most half full.
///
/// Written here rather than a `Dictionary`: a dictionary hashes its key with a seeded SipHash on
/// every lookup, and a task took two (its start and its reply), a tenth of the worker's own
/// instructions a task on the synchronous path (docs/performance-history.md). Here a key's
/// bucket comes from its request id mixed under a random seed (`RequestID.mixed(with:)`), so
/// a client choosing ids still cannot aim them at one bucket; and removal shifts the entries
/// after it back, so no tombstones pile up.
package struct RunningTasks: Sendable {
    package typealias Key = WorkerStateMachine.TaskKey

    private struct Entry: Sendable {
        var key: Key
        var slot: Int
    }

    private var buckets: [Entry?]
    private var shift: Int
    private let seed: UInt64
    package private(set) var count = 0

    /// With room for `minimumCapacity` tasks before it grows.
    package init(minimumCapacity: Int, seed: UInt64) {
        var size = 8
        while size < 2 * minimumCapacity { size *= 2 }
        buckets = Array(repeating: nil, count: size)
        shift = 64 - size.trailingZeroBitCount
        self.seed = seed
    }

    /// Tasks it holds before it grows.
    package var capacity: Int { buckets.count / 2 }

    package var isEmpty: Bool { count == 0 }

    /// The slot of the task `key`, if it runs.
    package subscript(key: Key) -> Int? {
        var index = bucket(of: key)
        while let entry = buckets[index] {
            if entry.key == key { return entry.slot }
            index = (index + 1) & mask
        }
        return nil
    }

    /// Adds `key` with `slot`, unless it is there already: then nothing changes, and its slot
    /// is returned.
    package mutating func insert(_ key: Key, slot: Int) -> Int? {
        if 2 * (count + 1) > buckets.count { grow() }
        var index = bucket(of: key)
        while let entry = buckets[index] {
            if entry.key == key { return entry.slot }
            index = (index + 1) & mask
        }
        buckets[index] = Entry(key: key, slot: slot)
        count += 1
        return nil
    }

    /// Removes `key`: its slot, or nil if it was not there.
    package mutating func remove(_ key: Key) -> Int? {
        var index = bucket(of: key)
        while let entry = buckets[index] {
            if entry.key == key {
                buckets[index] = nil
                count -= 1
                closeGap(at: index)
                return entry.slot
            }
            index = (index + 1) & mask
        }
        return nil
    }

    package mutating func removeAll() {
        guard count > 0 else { return }
        for index in buckets.indices { buckets[index] = nil }
        count = 0
    }

    /// Every task and its slot.
    package var all: [Key: Int] {
        Dictionary(uniqueKeysWithValues: buckets.lazy.compactMap { $0.map { ($0.key, $0.slot) } })
    }

    private var mask: Int { buckets.count - 1 }

    /// The top bits of the request id mixed under the seed.
    private func bucket(of key: Key) -> Int {
        Int(truncatingIfNeeded: key.requestID.mixed(with: seed) >> UInt64(shift))
    }

    /// After a removal at `hole`: moves back each entry of the run that follows whose home
    /// bucket is not between the hole and itself, so that every entry stays reachable from its
    /// home without a marker left behind.
    private mutating func closeGap(at start: Int) {
        var hole = start
        var index = (hole + 1) & mask
        while let entry = buckets[index] {
            let home = bucket(of: entry.key)
            if (index &- home) & mask >= (index &- hole) & mask {
                buckets[hole] = entry
                buckets[index] = nil
                hole = index
            }
            index = (index + 1) & mask
        }
    }

    private mutating func grow() {
        let entries = buckets.compactMap { $0 }
        buckets = Array(repeating: nil, count: buckets.count * 2)
        shift -= 1
        for entry in entries {
            var index = bucket(of: entry.key)
            while buckets[index] != nil { index = (index + 1) & mask }
            buckets[index] = entry
        }
    }
}
