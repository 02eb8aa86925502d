import Testing

@testable import SkyProtocol

/// A broker or a worker decodes each REQUEST's service name through a ``NameCache``: what it
/// gets must be what ``WireFormat/name(_:)-(ArraySlice<UInt8>)`` would give for those bytes,
/// whatever name came before (one of the same length that differs in a byte, an invalid one).
@Suite("Service names: the last one decoded, kept")
struct NameCacheTests {
    static let names: [String] =
        WireFormatNameTests.names + [
            "sky.scan", "sky.scbn", "sky.sca\u{7f}", "sky.scan", "sky.scan", "sky.echo",
            // 18 bytes: differing in the first word, the second, the tail.
            "sky.scan.long.name", "sky.scam.long.name", "sky.scan.lonh.name", "sky.scan.long.namf",
            "sky.scan.long.nam\u{1}",
        ]

    @Test func everyNameIsDecodedAsWithoutTheCache() {
        var cache = NameCache()
        // Each name after every other, and twice in a row.
        var sequence: [String] = []
        for first in Self.names { for second in Self.names { sequence += [first, second, second] } }
        var wrong: [String] = []
        for name in sequence {
            let bytes = Array(name.utf8)[...]
            let expected = try? WireFormat.name(bytes)
            let got = try? cache.name(bytes)
            if got != expected { wrong.append(name) }
        }
        let wrongCount = wrong.count
        #expect(wrongCount == 0, "\(wrong.prefix(3).map { Array($0.utf8) })")
    }

    /// A view of a larger buffer (as a received message's header is) compares its own bytes.
    @Test func aSliceOfALargerBufferIsComparedByItsBytes() throws {
        var cache = NameCache()
        let buffer = Array("xxsky.scanyy".utf8)
        #expect(try cache.name(buffer[2..<10]) == "sky.scan")
        #expect(try cache.name(buffer[3..<11]) == "ky.scany")
        #expect(try cache.name(Array("sky.scan".utf8)[...]) == "sky.scan")
    }
}

/// The name check reads eight bytes at a time: every byte value at every place of a word and
/// of a padded tail gives what a byte-at-a-time check gives.
@Suite("Service names: checked a word at a time")
struct NameShapeTests {
    static func reference(_ bytes: [UInt8]) -> WireFormat.NameShape {
        guard (1...WireFormat.maxNameLength).contains(bytes.count) else { return .invalid }
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x7f }) { return .invalid }
        return bytes.allSatisfy { $0 < 0x80 } ? .ascii : .beyondASCII
    }

    @Test(arguments: [1, 5, 8, 13, 16, 17])
    func everyByteAtEveryPlaceIsJudgedAsOneAtATime(length: Int) {
        var wrong = 0
        for place in 0..<length {
            for value in 0...255 {
                // Around it: plain letters, or bytes that are themselves borderline.
                for filler: UInt8 in [0x61, 0x20, 0x7e, 0x80, 0xff] {
                    var bytes = [UInt8](repeating: filler, count: length)
                    bytes[place] = UInt8(value)
                    let shape = bytes.withUnsafeBufferPointer { WireFormat.nameShape($0) }
                    if shape != Self.reference(bytes) { wrong += 1 }
                }
            }
        }
        #expect(wrong == 0)
    }
}
