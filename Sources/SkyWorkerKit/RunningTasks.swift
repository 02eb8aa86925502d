import SkyProtocol

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

    /// A task's key as plain words (its tag's up to 16 bytes and length), so that an entry is
    /// copied and compared as bits: a key's tag (`InlineBytes`) went through its enum's outlined
    /// value witnesses on every copy and comparison, about a fifth of the table's cost a task.
    /// A tag longer than 16 bytes (none of Sky's broker's) goes to ``longTags`` instead.
    private struct Entry: Sendable {
        var requestID: RequestID
        var first: UInt64
        var second: UInt64
        var count: UInt8
        var slot: Int

        func holds(_ requestID: RequestID, _ tag: (first: UInt64, second: UInt64, count: UInt8)) -> Bool {
            self.requestID == requestID && first == tag.first && second == tag.second && count == tag.count
        }

        var key: Key {
            Key(tag: DeliveryTag(InlineBytes(inlineWords: first, second, count: count)), requestID: requestID)
        }
    }

    private var buckets: [Entry?]
    private var shift: Int
    private let seed: UInt64
    /// Tasks whose tags are longer than 16 bytes.
    private var longTags: [Key: Int] = [:]
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
        guard let tag = key.tag.bytes.inlineWords else { return longTags[key] }
        var index = bucket(of: key.requestID)
        while let entry = buckets[index] {
            if entry.holds(key.requestID, tag) { return entry.slot }
            index = (index + 1) & mask
        }
        return nil
    }

    /// Adds `key` with `slot`, unless it is there already: then nothing changes, and its slot
    /// is returned.
    package mutating func insert(_ key: Key, slot: Int) -> Int? {
        guard let tag = key.tag.bytes.inlineWords else {
            if let present = longTags[key] { return present }
            longTags[key] = slot
            count += 1
            return nil
        }
        if 2 * (count + 1) > buckets.count { grow() }
        var index = bucket(of: key.requestID)
        while let entry = buckets[index] {
            if entry.holds(key.requestID, tag) { return entry.slot }
            index = (index + 1) & mask
        }
        buckets[index] = Entry(
            requestID: key.requestID, first: tag.first, second: tag.second, count: tag.count, slot: slot)
        count += 1
        return nil
    }

    /// Removes `key`: its slot, or nil if it was not there.
    package mutating func remove(_ key: Key) -> Int? {
        guard let tag = key.tag.bytes.inlineWords else {
            guard let slot = longTags.removeValue(forKey: key) else { return nil }
            count -= 1
            return slot
        }
        var index = bucket(of: key.requestID)
        while let entry = buckets[index] {
            if entry.holds(key.requestID, tag) {
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
        longTags.removeAll()
        count = 0
    }

    /// Every task and its slot.
    package var all: [Key: Int] {
        longTags.merging(buckets.lazy.compactMap { $0.map { ($0.key, $0.slot) } }) { first, _ in first }
    }

    private var mask: Int { buckets.count - 1 }

    /// The top bits of the request id mixed under the seed.
    private func bucket(of requestID: RequestID) -> Int {
        Int(truncatingIfNeeded: requestID.mixed(with: seed) >> UInt64(shift))
    }

    /// After a removal at `hole`: moves back each entry of the run that follows whose home
    /// bucket is not between the hole and itself, so that every entry stays reachable from its
    /// home without a marker left behind.
    private mutating func closeGap(at start: Int) {
        var hole = start
        var index = (hole + 1) & mask
        while let entry = buckets[index] {
            let home = bucket(of: entry.requestID)
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
            var index = bucket(of: entry.requestID)
            while buckets[index] != nil { index = (index + 1) & mask }
            buckets[index] = entry
        }
    }
}
