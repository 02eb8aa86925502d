import Testing

@testable import SkyProtocol

@Suite("Trace frames: the optional last frame of a REQUEST, and FEATURES")
struct TraceContextTests {
    static let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func aTraceContextIsHeaderLikeLinesAndReadsBack() throws {
        var context = TraceContext()
        context.set("traceparent", Self.traceparent)
        context.set("TraceState", "congo=t61rcWkgMzE")
        context.set("traceparent", Self.traceparent)
        let frame = try #require(context.frame)
        #expect(
            String(decoding: frame, as: UTF8.self) == "traceparent: \(Self.traceparent)\ntracestate: congo=t61rcWkgMzE")
        #expect(TraceContext(frame: frame) == context)
        #expect(TraceContext(frame: frame)["TRACEPARENT"] == Self.traceparent)
    }

    /// A bad trace context never fails a task: lines that cannot be used are skipped.
    @Test func linesThatCannotTravelAreLeftOut() {
        var context = TraceContext()
        context.set("bad key", "x")
        context.set("ok", "line\nbreak")
        #expect(context.frame == nil, "nothing valid: no frame at all")
        let read = TraceContext(frame: Array("garbage\nk: v\n: empty key\nK2:  spaced\n\u{1}bin: x".utf8))
        #expect(read.fields == [.init(key: "k", value: "v"), .init(key: "k2", value: "spaced")])
        context.set("big", String(repeating: "x", count: TraceContext.maxBytes))
        #expect(context.frame == nil, "over the limit: not sent")
    }

    @Test func aClientRequestCarriesItAsASeventhFrame() throws {
        var request = CodecRoundTripTests.request
        request.trace = Array("traceparent: \(Self.traceparent)".utf8)
        let frames = ClientToBroker.request(request).encode()
        #expect(frames.count == 7 && frames[6] == request.trace)
        #expect(try ClientToBroker.decode(frames) == .request(request))
        #expect(ClientToBroker.request(CodecRoundTripTests.request).encode().count == 6, "none: six frames as before")
    }

    @Test func aWorkerRequestCarriesItAsAnEighthFrame() throws {
        var request = CodecRoundTripTests.request
        request.header = RequestHeader(attempt: 3, timeoutMilliseconds: 2500)
        request.trace = Array("traceparent: \(Self.traceparent)".utf8)
        let frames = BrokerToWorker.request(tag: [9], request).encode()
        #expect(frames.count == 8 && frames[7] == request.trace)
        #expect(try BrokerToWorker.decode(frames) == .request(tag: [9], request))
    }

    @Test(arguments: [0, TraceContext.maxBytes + 1])
    func aTraceFrameOutsideItsSizeMakesTheRequestMalformed(size: Int) {
        var frames = ClientToBroker.request(CodecRoundTripTests.request).encode()
        frames.append([UInt8](repeating: 0x61, count: size))
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode(frames) }
        var workerFrames = BrokerToWorker.request(tag: [9], CodecRoundTripTests.request).encode()
        workerFrames.append([UInt8](repeating: 0x61, count: size))
        #expect(throws: ProtocolError.self) { try BrokerToWorker.decode(workerFrames) }
        frames.append([1])
        #expect(throws: ProtocolError.self, "eight frames") { try ClientToBroker.decode(frames) }
    }

    @Test func featuresRoundTripsAndIsBounded() throws {
        let command = WorkerToBroker.features([TraceContext.feature, "later"])
        let frames = command.encode()
        #expect(frames == [Array("SKYW01".utf8), [0x09], Array("trace-context".utf8), Array("later".utf8)])
        #expect(try WorkerToBroker.decode(frames) == command)
        #expect(try WorkerToBroker.decode([Array("SKYW01".utf8), [0x09]]) == .features([]))
        let many =
            [Array("SKYW01".utf8), [0x09]] + Array(repeating: Array("f".utf8), count: WorkerToBroker.maxFeatures + 1)
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(many) }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode([Array("SKYW01".utf8), [0x09], []]) }
    }
}
