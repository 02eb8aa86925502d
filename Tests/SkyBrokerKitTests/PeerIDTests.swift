import Testing

@testable import SkyBrokerKit

/// Routing ids key the broker's tables: equal bytes must be one key, different bytes (also ids
/// that differ only in length or in zero padding) different keys.
@Suite("PeerID: routing ids as table keys")
struct PeerIDTests {
    /// Ids a peer could choose to make an inline id's words meet: zero padding, every length up
    /// to the inline limit, the 16th byte equal to a shorter id's length, and heap ids.
    static let ids: [[UInt8]] = {
        var ids: [[UInt8]] = (0...16).map { [UInt8](repeating: 0, count: $0) }
        for length in 0..<16 {
            ids.append([UInt8](repeating: 0, count: 15) + [UInt8(length) ^ 16])
        }
        ids += [[0, 0, 1], [0, 1], [1], [0x80] + [UInt8](repeating: 0, count: 15)]
        ids += [[UInt8](repeating: 0, count: 17), [UInt8](repeating: 7, count: 40)]
        return ids
    }()

    @Test(arguments: [0, 1, 5, 15, 16, 17, 255])
    func roundTripsAndComparesByValue(length: Int) {
        let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 1) }
        let id = PeerID(bytes)
        #expect(id.bytes == bytes)
        #expect(id.withBytes { Array($0) } == bytes, "the bytes a message to the peer is written from")
        #expect(id == PeerID(bytes))
        #expect(id != PeerID(bytes + [0]))
        #expect(Set([id, PeerID(bytes)]).count == 1)
    }

    @Test func equalBytesAreOneKeyAndDifferentBytesAreDifferentKeys() {
        var table: [PeerID: Int] = [:]
        for (index, bytes) in Self.ids.enumerated() {
            #expect(PeerID(bytes).bytes == bytes)
            #expect(PeerID(bytes) == PeerID(bytes[...]))
            #expect(PeerID(bytes).hashValue == PeerID(Array(bytes)).hashValue)
            table[PeerID(bytes)] = index
        }
        let distinct = Set(Self.ids).count
        #expect(table.count == distinct)
        for bytes in Self.ids {
            #expect(table[PeerID(bytes)].map { Self.ids[$0] } == bytes)
        }
    }

    /// Ids whose inline words are alike do not share a hash beyond a few (one per length at
    /// most), so no peer can flood a bucket by choosing them.
    @Test func idsThatShareAHashAreFewAndNeverEqual() {
        var byHash: [Int: Set<[UInt8]>] = [:]
        for bytes in Self.ids { byHash[PeerID(bytes).hashValue, default: []].insert(bytes) }
        #expect(byHash.values.allSatisfy { $0.count <= 17 })
        for group in byHash.values where group.count > 1 {
            let peers = group.map { PeerID($0) }
            #expect(Set(peers).count == group.count)
        }
    }
}
