import Testing

@testable import SkyProtocol

@Suite("BrokerFeatures: the answer to mmi.features")
struct BrokerFeaturesTests {
    @Test(arguments: [
        BrokerFeatures(),
        BrokerFeatures(takesTrace: true),
        BrokerFeatures(maxFrameSize: 1024),
        BrokerFeatures(takesTrace: true, maxFrameSize: 16 << 20),
        BrokerFeatures.broker(maxFrameSize: 1024),
        BrokerFeatures(edition: 3, takesNoWorkersGrace: true),
        BrokerFeatures.broker(maxFrameSize: 1024, eventsEndpoint: "tcp://0.0.0.0:40123"),
        BrokerFeatures.broker(maxFrameSize: 1024, eventsEndpoint: "ipc:///run/sky/events"),
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
        for junk in ["edition=", "edition=0", "edition=-1", "edition=two", "edition"] {
            #expect(BrokerFeatures(decoding: Array(junk.utf8)).edition == nil, "\(junk)")
        }
        #expect(BrokerFeatures(decoding: Array("heartbeat-ms=2500".utf8)).heartbeatMilliseconds == 2500)
        var told = BrokerFeatures()
        told.heartbeatMilliseconds = 1000
        #expect(told.lines == ["heartbeat-ms=1000"] && BrokerFeatures(lines: told.lines) == told)
        for junk in ["events-endpoint=", "events-endpoint"] {
            #expect(BrokerFeatures(decoding: Array(junk.utf8)).eventsEndpoint == nil, "\(junk)")
        }
    }

    /// The edition is one more line, added so that readers written before it skip it: this
    /// reader, given what an edition-2 broker says beside lines of a later one, reads every line
    /// it knows as before; and the line is a valid name, so a FEATURES frame may carry it.
    @Test func theEditionIsALineThatReadersWhichPredateItSkip() throws {
        let later = BrokerFeatures.broker(maxFrameSize: 65536).lines + ["edition-note=x", "something-later"]
        let read = BrokerFeatures(lines: later)
        #expect(read == BrokerFeatures.broker(maxFrameSize: 65536))
        #expect(read.edition == BrokerFeatures.currentEdition && BrokerFeatures.currentEdition == 2)
        #expect(BrokerFeatures.currentEditionLine == "edition=2")
        let frames = [Array("SKYW01".utf8), [0x09]] + later.map { Array($0.utf8) }
        #expect(try BrokerToWorker.decode(frames) == .features(later))
        #expect(try WorkerToBroker.decode(frames) == .features(later))
    }
}
