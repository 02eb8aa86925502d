import SkyProtocol
import Testing

/// `WireFormat.isValidName` (checked on every client call before a name goes on the wire) and
/// `WireFormat.name` (the decoder every receiver runs) agree on every name: a client never
/// sends a name that the broker then drops unanswered, and never refuses one it would take.
@Suite("Service names: what a client sends is what a broker takes")
struct WireFormatNameTests {
    static let names: [String] = [
        "", "a", "sky.scan", "mmi.workers", "läuft", "数据", "🚀 launch", "with space",
        String(repeating: "x", count: 255), String(repeating: "x", count: 256),
        String(repeating: "é", count: 127), String(repeating: "é", count: 128),
        "tab\there", "new\nline", "nul\u{0}byte", "del\u{7f}", "escape\u{1b}[0m", "\u{1f}",
        "\u{80}", "\u{9f}",
    ]

    @Test(arguments: names)
    func theCheckAndTheDecoderAgree(_ name: String) {
        let decoded = try? WireFormat.name(Array(name.utf8))
        #expect(WireFormat.isValidName(name) == (decoded != nil), "\(Array(name.utf8))")
        if let decoded { #expect(decoded == name) }
    }

    @Test func theLimitsAreWhatTheProtocolSays() {
        #expect(!WireFormat.isValidName(""))
        #expect(WireFormat.isValidName(String(repeating: "x", count: WireFormat.maxNameLength)))
        #expect(!WireFormat.isValidName(String(repeating: "x", count: WireFormat.maxNameLength + 1)))
        // 128 two-byte characters are 256 bytes: the limit counts bytes, not characters.
        #expect(!WireFormat.isValidName(String(repeating: "é", count: 128)))
        #expect(!WireFormat.isValidName("tab\there"))
        #expect(!WireFormat.isValidName("del\u{7f}"))
        #expect(WireFormat.isValidName("läuft"))
    }

    /// The broker's quick check of its own services' prefix answers as `hasPrefix` does.
    @Test(arguments: names + ["mmi.", "mmi", "mm", "", "Mmi.x", "mmi.jobs.submit", "xmmi.", "mmi.数据", "ｍmi."])
    func theReservedPrefixIsFoundAsHasPrefixFindsIt(_ name: String) {
        #expect(BrokerService.isReserved(name) == name.hasPrefix(BrokerService.prefix), "\(name)")
    }
}
