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
