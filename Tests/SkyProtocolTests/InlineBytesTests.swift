import Testing

@testable import SkyProtocol

/// Routing ids and delivery tags are kept as ``InlineBytes``, whose short values are read into
/// two words a piece at a time: each length must lend back exactly its bytes, from any
/// alignment, and values are equal (and hash alike) exactly when their bytes are.
@Suite("Inline bytes")
struct InlineBytesTests {
    @Test func everyLengthLendsBackItsBytesFromAnyAlignment() {
        var wrong: [String] = []
        var random = SystemRandomNumberGenerator()
        for length in 0...20 {
            for _ in 0..<8 {
                let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
                // The same bytes after 0 to 7 others, so that the reads start at every alignment.
                for shift in 0..<8 {
                    let padded = [UInt8](repeating: 0xAB, count: shift) + bytes
                    let value = padded.withUnsafeBytes { InlineBytes(UnsafeRawBufferPointer(rebasing: $0[shift...])) }
                    if value.array != bytes || value.count != length || value != InlineBytes(bytes)
                        || value.hashValue != InlineBytes(bytes).hashValue
                    {
                        wrong.append("\(length) bytes at offset \(shift)")
                    }
                }
            }
        }
        #expect(wrong.count == 0, "first: \(wrong.first ?? "")")
    }

    @Test func valuesDifferWhenTheirBytesDoTrailingZerosIncluded() {
        #expect(InlineBytes([1, 2, 3]) != InlineBytes([1, 2, 3, 0]))
        #expect(InlineBytes([]) != InlineBytes([0]))
        #expect(InlineBytes([UInt8](repeating: 7, count: 16)) != InlineBytes([UInt8](repeating: 7, count: 17)))
        #expect(InlineBytes(Array(0..<9)) != InlineBytes(Array(0..<8) + [9]))
    }
}
