import SkyProtocol
import Testing

@testable import SkyWorkerKit

/// The worker's table of running tasks against a `Dictionary` doing the same: whatever the
/// order of starts and ends, and ids made to share buckets, it finds what the dictionary finds.
@Suite("Worker: the table of running tasks")
struct RunningTasksTests {
    typealias Key = WorkerStateMachine.TaskKey

    /// A key whose tag is `length` bytes: up to 16 are kept as words in the table, longer
    /// ones (no tag of Sky's broker) in a dictionary beside it.
    static func key(_ high: UInt64, _ low: UInt64, tag: UInt8 = 1, length: Int = 2) -> Key {
        let bytes = [tag, UInt8(truncatingIfNeeded: low)] + [UInt8](repeating: tag, count: length - 2)
        return Key(tag: DeliveryTag(bytes), requestID: RequestID(high: high, low: low))
    }

    /// Random starts and ends, with keys drawn from a small pool so that repeats, second
    /// deliveries (the same id under another tag) and removals of absent keys all happen; the
    /// table grows from its smallest size several times over. Tags of 2, 8, 16 and 17 bytes:
    /// both sides of the longest kept as words.
    @Test(arguments: [1, 2, 3, 4] as [UInt64])
    func itAgreesWithADictionary(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var table = RunningTasks(minimumCapacity: 1, seed: seed &* 31)
        var reference: [Key: Int] = [:]
        let pool = (0..<300).map { index in
            Self.key(
                random.next() % 4, random.next() % 64, tag: UInt8(index % 3), length: [2, 8, 16, 17][index % 4])
        }
        for step in 0..<20_000 {
            let key = pool[Int(random.next() % UInt64(pool.count))]
            if random.next() % 3 == 0 {
                #expect(table.remove(key) == reference.removeValue(forKey: key), "step \(step)")
            } else {
                let earlier = reference[key]
                if earlier == nil { reference[key] = step }
                #expect(table.insert(key, slot: step) == earlier, "step \(step)")
            }
            #expect(table.count == reference.count)
        }
        for key in pool { #expect(table[key] == reference[key]) }
        #expect(table.all == reference)
        #expect(table.capacity >= reference.count)
        table.removeAll()
        #expect(table.isEmpty && pool.allSatisfy { table[$0] == nil })
    }

    /// Many keys of one bucket (one request id under many tags: the bucket is the id's): each
    /// is found, and removing every other one from their run leaves the rest reachable.
    @Test func keysOfOneBucketStayReachableAsTheirRunShrinks() {
        var table = RunningTasks(minimumCapacity: 64, seed: 7)
        let keys = (0..<40).map { Self.key(5, 9, tag: UInt8($0)) }
        for (slot, key) in keys.enumerated() { #expect(table.insert(key, slot: slot) == nil) }
        for index in stride(from: 1, to: keys.count, by: 2) { #expect(table.remove(keys[index]) == index) }
        for (slot, key) in keys.enumerated() { #expect(table[key] == (slot % 2 == 0 ? slot : nil)) }
    }
}
