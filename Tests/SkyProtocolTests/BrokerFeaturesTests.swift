import Testing

@testable import SkyProtocol

@Suite("BrokerFeatures: the answer to mmi.features")
struct BrokerFeaturesTests {
    @Test(arguments: [
        BrokerFeatures(),
        BrokerFeatures(takesTrace: true),
        BrokerFeatures(maxFrameSize: 1024),
        BrokerFeatures(takesTrace: true, maxFrameSize: 16 << 20),
    ])
    func whatABrokerSaysIsReadBackAsItWasSaid(features: BrokerFeatures) {
        #expect(BrokerFeatures(decoding: features.encode()) == features)
    }

    /// A broker before the frame limit said only `trace-context`; one before features says
    /// nothing; a later one may say more. Lines a client does not know, or cannot read, are
    /// skipped, never fatal.
    @Test func unknownOrUnreadableLinesAreSkipped() {
        #expect(BrokerFeatures(decoding: Array("trace-context".utf8)) == BrokerFeatures(takesTrace: true))
        #expect(BrokerFeatures(decoding: []) == BrokerFeatures())
        let later = "something-new\nmax-frame-size=70000\ntrace-context\nmore=1=2\n\n"
        #expect(BrokerFeatures(decoding: Array(later.utf8)) == BrokerFeatures(takesTrace: true, maxFrameSize: 70000))
        for junk in [
            "max-frame-size=", "max-frame-size=-5", "max-frame-size=0", "max-frame-size=12x", "max-frame-size",
        ] {
            #expect(BrokerFeatures(decoding: Array(junk.utf8)).maxFrameSize == nil, "\(junk)")
        }
        #expect(BrokerFeatures(decoding: [0xff, 0xfe, 0x0a, 0x00]) == BrokerFeatures())
    }
}
