import SkyWire
import Testing

@testable import SkyProtocol

@Suite("Protocol codec: every command round-trips")
struct CodecRoundTripTests {
    static let id = RequestID(high: 0x0102_0304_0506_0708, low: 0x090a_0b0c_0d0e_0f10)
    static let request = TaskRequest(
        requestID: id, service: "sky.scan", header: RequestHeader(attempt: 3, timeoutMilliseconds: 2500),
        body: Array(#"{"sector":7}"#.utf8))

    @Test func requestIDFrameIsBigEndian() throws {
        #expect(Self.id.frame == Array(1...16))
        #expect(try RequestID(frame: Self.id.frame) == Self.id)
        #expect(Self.id.description == "0102030405060708090a0b0c0d0e0f10")
    }

    @Test func randomRequestIDsDiffer() {
        let ids = Set((0..<1000).map { _ in RequestID.random() })
        #expect(ids.count == 1000)
    }

    @Test func clientRequest() throws {
        let command = ClientToBroker.request(Self.request)
        let frames = command.encode()
        #expect(frames.count == 6)
        #expect(frames[0] == Array("SKYC01".utf8))
        #expect(frames[1] == [0x01])
        #expect(frames[4] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
        #expect(try ClientToBroker.decode(frames) == command)
    }

    @Test func aRequestWithItsOwnNoWorkersGraceCarriesA12ByteHeaderAndWorkersGet8() throws {
        var request = Self.request
        request.header.noWorkersGraceMilliseconds = 0x0102_0304
        let frames = ClientToBroker.request(request).encode()
        #expect(frames[4] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4, 1, 2, 3, 4])
        #expect(try ClientToBroker.decode(frames) == .request(request))
        let toWorker = BrokerToWorker.request(tag: [7], request).encode()
        #expect(toWorker[5] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
    }

    @Test func aPrioritizedRequestCarriesA16ByteHeaderAndWorkersGet8() throws {
        var request = Self.request
        request.header.priority = -50
        let frames = ClientToBroker.request(request).encode()
        #expect(frames[4] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xce])
        #expect(try ClientToBroker.decode(frames) == .request(request))
        #expect(BrokerToWorker.request(tag: [7], request).encode()[5] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
        // A peer's number beyond the scale is clamped, not refused.
        var wide = frames
        wide[4] = [0, 0, 0, 3, 0, 0, 0x09, 0xc4, 0, 0, 0, 0, 0, 0, 0x01, 0xf4]
        guard case .request(let decoded) = try ClientToBroker.decode(wide) else { throw ProtocolError.empty }
        #expect(decoded.header.priority == 127)
        wide[4] = Array(wide[4].prefix(14))
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode(wide) }
    }

    /// A concurrency key makes the header 25 bytes plus the key: the 20-byte fields, the limit,
    /// the key's length and the key. Workers get 8 bytes; a wrong length, a limit over
    /// 1,000,000 or a key that is not a name makes the message malformed.
    @Test func aKeyedRequestCarriesItsKeyInALongerHeaderAndWorkersGet8() throws {
        var request = Self.request
        request.concurrencyKey = "customer-42"
        request.concurrencyLimit = 2
        let frames = ClientToBroker.request(request).encode()
        #expect(frames.count == 6 && frames[4].count == 25 + 11)
        #expect(Array(frames[4].prefix(8)) == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
        #expect(Array(frames[4][20..<25]) == [0, 0, 0, 2, 11] && Array(frames[4][25...]) == Array("customer-42".utf8))
        #expect(try ClientToBroker.decode(frames) == .request(request))
        #expect(request.queuedSize == request.body.count + 11, "the key counts in the queue's bytes")
        #expect(BrokerToWorker.request(tag: [7], request).encode()[5] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
        var traced = request
        traced.trace = [1, 2, 3]
        #expect(try ClientToBroker.decode(ClientToBroker.request(traced).encode()) == .request(traced))
        #expect(traced.concurrencyKey == "customer-42" && traced.concurrencyLimit == 2)
        for bad in [
            Array(frames[4].prefix(21)), Array(frames[4].dropLast()), frames[4] + [0x41],
            Array(frames[4].prefix(20)) + [0, 0x0f, 0x42, 0x41, 1, 0x41],
            Array(frames[4].prefix(20)) + [0, 0, 0, 1, 1, 0x07],
            Array(frames[4].prefix(20)) + [0, 0, 0, 1, 0],
        ] {
            var wrong = frames
            wrong[4] = bad
            #expect(throws: ProtocolError.self) { try ClientToBroker.decode(wrong) }
        }
    }

    @Test(arguments: ReplyStatus.allCases)
    func brokerReply(status: ReplyStatus) throws {
        let command = BrokerToClient.reply(
            TaskReply(requestID: Self.id, attempt: 258, status: status, body: [1, 2, 3]))
        let frames = command.encode()
        #expect(frames.count == 6)
        #expect(frames[1] == [0x02])
        #expect(frames[3] == [0, 0, 1, 2])
        #expect(frames[4] == [status.rawValue])
        #expect(try BrokerToClient.decode(frames) == command)
    }

    @Test func workerReady() throws {
        let command = WorkerToBroker.ready(
            WorkerAnnouncement(name: "host-1", capacity: 8, services: ["sky.scan", "sky.echo"]))
        let frames = command.encode()
        #expect(frames.count == 6)
        #expect(frames[0] == Array("SKYW01".utf8))
        #expect(frames[3] == [0, 0, 0, 8])
        #expect(try WorkerToBroker.decode(frames) == command)
    }

    @Test func workerReply() throws {
        let command = WorkerToBroker.reply(
            tag: [0, 1, 2, 3, 4], TaskReply(requestID: Self.id, status: .handlerError, body: [9]))
        #expect(try WorkerToBroker.decode(command.encode()) == command)
    }

    @Test func heartbeatAndDisconnectBothWays() throws {
        #expect(WorkerToBroker.heartbeat.encode() == [Array("SKYW01".utf8), [0x04]])
        #expect(WorkerToBroker.disconnect.encode() == [Array("SKYW01".utf8), [0x05]])
        #expect(try WorkerToBroker.decode(WorkerToBroker.heartbeat.encode()) == .heartbeat)
        #expect(try WorkerToBroker.decode(WorkerToBroker.disconnect.encode()) == .disconnect)
        #expect(try BrokerToWorker.decode(BrokerToWorker.heartbeat.encode()) == .heartbeat)
        #expect(try BrokerToWorker.decode(BrokerToWorker.disconnect.encode()) == .disconnect)
    }

    /// FEATURES goes both ways with the same frames: a line a frame, each a valid name, at most 32.
    @Test func featuresFromTheBrokerToAWorker() throws {
        let features = BrokerToWorker.features(["max-frame-size=65536"])
        #expect(features.encode() == [Array("SKYW01".utf8), [0x09], Array("max-frame-size=65536".utf8)])
        #expect(try BrokerToWorker.decode(features.encode()) == features)
        #expect(try BrokerToWorker.decode([Array("SKYW01".utf8), [0x09]]) == .features([]))
        #expect(throws: ProtocolError.self) {
            try BrokerToWorker.decode([Array("SKYW01".utf8), [0x09], [0x41, 0x0a]])
        }
        #expect(throws: ProtocolError.self) {
            try BrokerToWorker.decode([Array("SKYW01".utf8), [0x09]] + Array(repeating: [0x41], count: 33))
        }
    }

    @Test func brokerRequestToWorker() throws {
        let command = BrokerToWorker.request(tag: [0, 0xaa, 0xbb, 0xcc, 0xdd], Self.request)
        let frames = command.encode()
        #expect(frames.count == 7)
        #expect(frames[1] == [0x02])
        #expect(try BrokerToWorker.decode(frames) == command)
    }

    /// The broker builds its sends in one buffer with the ROUTER's routing-id frame in front:
    /// the same frames as the plain encoding, for every command, traced or not.
    @Test func routedMessagesAreTheRoutingIDThenThePlainFrames() throws {
        let routing: [UInt8] = [0, 0x6b, 0x8b, 0x45, 0x67]
        var traced = Self.request
        traced.trace = Array("traceparent: 00-abc-def-01".utf8)
        let toWorker: [BrokerToWorker] = [
            .request(tag: [0, 0, 0, 0, 0, 0, 0, 9], Self.request), .request(tag: [1], traced), .heartbeat, .disconnect,
            .cancel(tag: [0, 0, 0, 0, 0, 0, 0, 9], Self.id), .drainingAcknowledged, .refused(reason: "wrong port"),
        ]
        for command in toWorker {
            #expect(command.frames(routedTo: routing).arrays == [routing] + command.encode())
            #expect(command.frames().arrays == command.encode())
        }
        #expect(BrokerToWorker.request(tag: [1], traced).encode().last == traced.trace)
        #expect(BrokerToWorker.request(tag: [1], traced).encode()[5] == [0, 0, 0, 3, 0, 0, 0x09, 0xc4])
        for status in ReplyStatus.allCases {
            let command = BrokerToClient.reply(TaskReply(requestID: Self.id, attempt: 7, status: status, body: [9]))
            #expect(command.frames(routedTo: routing).arrays == [routing] + command.encode())
            #expect(command.encode()[4] == [status.rawValue])
            #expect(try BrokerToClient.decode(command.frames(routedTo: routing).dropFirst()) == command)
        }
    }

    /// Decoding a message received in one buffer gives what decoding its frames as arrays gives.
    @Test func decodingFromOneBufferMatchesDecodingArrays() throws {
        let request = ClientToBroker.request(Self.request)
        #expect(try ClientToBroker.decode(request.frames()) == request)
        #expect(try ClientToBroker.decode(Frames([[1, 2]] + request.encode()).dropFirst()) == request)
        let cancel = ClientToBroker.cancel(Self.id)
        #expect(try ClientToBroker.decode(cancel.frames()) == cancel)
        let reply = WorkerToBroker.reply(
            tag: [0, 0, 0, 0, 0, 0, 0, 5], TaskReply(requestID: Self.id, status: .ok, body: []))
        #expect(try WorkerToBroker.decode(reply.frames()) == reply)
        #expect(reply.frames().arrays[5] == [])
        let ready = WorkerToBroker.ready(WorkerAnnouncement(name: "w", capacity: 4, services: ["a", "b", "c"]))
        #expect(try WorkerToBroker.decode(ready.frames()) == ready)
    }

    @Test func eventRoundTrip() throws {
        let event = SkyEvent(
            seq: 42, event: .workerDisconnected, time: "2026-11-22T04:14:27.595Z",
            worker: WorkerInfo(id: "00aabb", name: "w1", capacity: 4, services: ["sky.scan"]),
            reason: .graceful, tasksHeld: 2)
        let frames = event.encodeFrames()
        #expect(frames[0] == Array("worker.disconnected".utf8))
        #expect(frames[1] == Array("SKYE01".utf8))
        #expect(frames[2] == [0, 0, 0, 0, 0, 0, 0, 42])
        #expect(try SkyEvent.decode(frames) == event)
    }

    @Test func unknownEventKindsStillDecode() throws {
        let event = SkyEvent(seq: 1, event: EventKind(rawValue: "future.thing"), time: "t")
        #expect(try SkyEvent.decode(event.encodeFrames()).event.rawValue == "future.thing")
    }

    /// A service's `paused` in `broker.stats` is an addition: a stats event from a broker that
    /// predates it reads with none, and one carrying it reads, beside a key a later broker may
    /// add (skipped, as readers that predate `paused` skip it).
    @Test func aServicesPausedIsReadWhenPresentAndSkippedByOlderReaders() throws {
        func stats(_ service: String) -> [[UInt8]] {
            let body =
                #"{"event":"broker.stats","seq":3,"stats":{"capacity":4,"completed":0,"completedPerSecond":0,"inFlight":0,"queued":1,"#
                + #""services":{"a":{"completed":0,"completedPerSecond":0,"failed":0,"queued":1"# + service
                + #"}},"workers":1},"time":"t"}"#
            return [Array("broker.stats".utf8), Array("SKYE01".utf8), [0, 0, 0, 0, 0, 0, 0, 3], Array(body.utf8)]
        }
        #expect(try SkyEvent.decode(stats("")).stats?.services?["a"]?.paused == nil, "an older broker's")
        #expect(try SkyEvent.decode(stats(#","paused":true"#)).stats?.services?["a"]?.paused == true)
        // Sky's reader skips a key it does not know, as a reader before `paused` skipped it.
        #expect(try SkyEvent.decode(stats(#","paused":true,"later":[1]"#)).stats?.services?["a"]?.paused == true)
    }

    /// `counters` in `broker.stats` is an addition too: absent from an older broker's stats,
    /// read from a broker's that carries them, with a counter a later broker may add skipped.
    @Test func theCountersInStatsAreReadWhenPresent() throws {
        var stats = BrokerStats(workers: 0, capacity: 0, queued: 0, inFlight: 0, completed: 0, completedPerSecond: 0)
        #expect(
            try SkyEvent.decode(SkyEvent(seq: 1, event: .brokerStats, time: "t", stats: stats).encodeFrames())
                .stats?.counters == nil, "an older broker's")
        var counters = BrokerCounters()
        counters.malformedClientMessages = 531
        stats.counters = counters
        let frames = SkyEvent(seq: 2, event: .brokerStats, time: "t", stats: stats).encodeFrames()
        #expect(try SkyEvent.decode(frames).stats?.counters == counters)
        let later = String(decoding: frames[3], as: UTF8.self).split(separator: #""malformedClientMessages":531"#)
            .joined(separator: #""malformedClientMessages":531,"laterCounter":2"#)
        #expect(later.contains("laterCounter"))
        var laterFrames = frames
        laterFrames[3] = Array(later.utf8)
        #expect(try SkyEvent.decode(laterFrames).stats?.counters?.malformedClientMessages == 531)
    }

    @Test func remoteErrorBodyRoundTripsAndToleratesPlainText() {
        let body = RemoteErrorBody(type: "MyError", message: "boom")
        #expect(RemoteErrorBody(decoding: body.encoded()) == body)
        #expect(RemoteErrorBody(decoding: Array("plain".utf8)) == RemoteErrorBody(type: "unknown", message: "plain"))
    }
}
