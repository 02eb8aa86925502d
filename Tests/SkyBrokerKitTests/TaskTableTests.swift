import SkyProtocol
import Testing

@testable import SkyBrokerKit

/// The broker's table of unanswered requests: a key is found by the hash it carries, removals
/// leave no debris that hides another key, and it grows and shrinks without losing one.
@Suite("Task table")
struct TaskTableTests {
    typealias Key = BrokerStateMachine.TaskKey
    typealias Place = BrokerStateMachine.TaskPlace

    func key(_ client: UInt32, _ low: UInt64, hash: Int? = nil) -> Key {
        let id = RequestID(high: 7, low: low)
        return hash.map { Key(client: client, requestID: id, hash: $0) } ?? Key(client: client, requestID: id)
    }

    func place(_ low: UInt64) -> Place { .waiting(arrival: low << BrokerStateMachine.slotBits | 1) }

    /// A model: the table answers as a dictionary does over a long random run of inserts,
    /// updates and removals, with keys whose hashes collide on purpose (a handful of values, so
    /// probe runs are long and removals shift entries back across them and across the end).
    @Test(arguments: [false, true])
    func itAnswersAsADictionaryDoes(collidingHashes: Bool) {
        var table = BrokerStateMachine.TaskTable(minimumCapacity: 8)
        var model: [Key: Place] = [:]
        var random = SplitMix64(seed: collidingHashes ? 11 : 12)
        for step in 0..<20_000 {
            let low = random.next() % 300
            let hash = collidingHashes ? Int(low % 5) * 3 - 1 : nil
            let key = key(UInt32(low % 3), low, hash: hash)
            switch random.next() % 3 {
            case 0, 1:
                table[key] = place(UInt64(step))
                model[key] = place(UInt64(step))
            default:
                table[key] = nil
                model[key] = nil
            }
            #expect(table.count == model.count)
            if step % 997 == 0 {
                for low in UInt64(0)..<300 {
                    let probe = self.key(UInt32(low % 3), low, hash: collidingHashes ? Int(low % 5) * 3 - 1 : nil)
                    #expect(table[probe] == model[probe], "step \(step), key \(low)")
                }
            }
        }
        for (key, place) in model { #expect(table[key] == place) }
        let resized = table.resized(minimumCapacity: 8)
        #expect(resized.count == model.count)
        for (key, place) in model { #expect(resized[key] == place) }
    }

    @Test func itGrowsAtThreeQuartersFullAndAResizeGivesTheRoomBack() {
        var table = BrokerStateMachine.TaskTable(minimumCapacity: 4)
        #expect(table.capacity == 8)
        for low in UInt64(0)..<1000 { table[key(1, low)] = place(low) }
        #expect(table.count == 1000)
        #expect(table.capacity == 2048)
        for low in UInt64(0)..<990 { table[key(1, low)] = nil }
        let smaller = table.resized(minimumCapacity: 4)
        #expect(smaller.capacity == 16)
        #expect(smaller.count == 10)
        for low in UInt64(990)..<1000 { #expect(smaller[key(1, low)] == place(low)) }
        #expect(smaller[key(1, 5)] == nil)
        table.removeAll()
        #expect(table.count == 0)
        #expect(table[key(1, 995)] == nil)
    }

    /// A key's hash is computed from the client and the request id once, and a key made again
    /// with that hash is the same key.
    @Test func aKeyMadeWithItsStoredHashIsTheSameKey() {
        let fresh = key(3, 42)
        let stored = key(3, 42, hash: fresh.hash)
        #expect(fresh == stored)
        #expect(fresh.hash == key(3, 42).hash)
        #expect(key(3, 43).hash != fresh.hash)
        #expect(key(4, 42).hash != fresh.hash)
    }
}
