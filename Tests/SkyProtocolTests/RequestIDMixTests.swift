import Testing

@testable import SkyProtocol

/// The buckets of the tables keyed by request id (the broker's requests, the worker's running
/// tasks) come from ``RequestID/mixed(with:)``: ids a client makes alike, in any arithmetic
/// way, still spread as random ones would.
@Suite("RequestID: mixed under a seed for a table's bucket")
struct RequestIDMixTests {
    static let buckets = 4096

    static func spread(_ ids: [RequestID], seed: UInt64) -> Int {
        Set(ids.map { $0.mixed(with: seed) >> 52 }).count
    }

    /// 4,096 ids into 4,096 buckets: random ones fill about 63 % of them. Ids of one XOR of
    /// their halves (which `high ^ low` put in one bucket), counting ids, and ids differing in
    /// the high half only fill as many.
    @Test(arguments: [1, 0xDEAD_BEEF, .max] as [UInt64])
    func idsMadeAlikeSpreadAsRandomOnesDo(seed: UInt64) {
        let count = UInt64(Self.buckets)
        let sameXOR = (0..<count).map { RequestID(high: $0, low: $0 ^ 0x5555) }
        let counting = (0..<count).map { RequestID(high: 0, low: $0) }
        let highOnly = (0..<count).map { RequestID(high: $0 << 40, low: 7) }
        for (name, ids) in [("same XOR", sameXOR), ("counting", counting), ("high half only", highOnly)] {
            let used = Self.spread(ids, seed: seed)
            #expect(used > Self.buckets / 2, "\(name): \(used) of \(Self.buckets) buckets")
        }
    }

    /// Another seed, other buckets: the seed is what a client cannot know.
    @Test func anotherSeedGivesOtherBuckets() {
        let ids = (0..<64).map { RequestID(high: 1, low: UInt64($0)) }
        let one = ids.map { $0.mixed(with: 1) >> 52 }
        let other = ids.map { $0.mixed(with: 2) >> 52 }
        #expect(zip(one, other).filter { $0 == $1 }.count < 8)
    }
}
