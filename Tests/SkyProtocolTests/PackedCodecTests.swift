import SkyWire
import Testing

@testable import SkyProtocol

/// The packed forms (signature version 2: one header frame, then the body): every byte of the
/// header where docs/protocol.md puts it, the same fields as the framed form, and every short,
/// long or broken header a typed error.
@Suite("Protocol codec: packed messages")
struct PackedCodecTests {
    static let id = RequestID(high: 0x0102_0304_0506_0708, low: 0x090a_0b0c_0d0e_0f10)
    static let tag: DeliveryTag = [0, 0, 0, 0, 0, 0, 0, 9]
    static let request = TaskRequest(
        requestID: id, service: "sky.scan", header: RequestHeader(attempt: 3, timeoutMilliseconds: 2500),
        body: Array(#"{"sector":7}"#.utf8))

    static let idBytes: [UInt8] = Array(1...16)

    @Test func aWorkerRequestIsAHeaderAndABody() throws {
        let command = BrokerToWorker.packedRequest(tag: Self.tag, Self.request)
        let frames = command.encode()
        #expect(frames.count == 2)
        #expect(
            frames[0]
                == Array("SKYW02".utf8) + [0x02] + Self.idBytes + [0, 0, 0, 3] + [0, 0, 0x09, 0xc4] + [8]
                + Self.tag.bytes.array
                + Array("sky.scan".utf8))
        #expect(frames[1] == Self.request.body)
        #expect(try BrokerToWorker.decode(frames) == command)
    }

    /// A header whose signature is wrong in any one byte is not a packed message of that
    /// protocol: every decoder refuses it with a typed error.
    @Test func aSignatureWrongInAnyByteIsRefused() {
        let packed: [(String, [[UInt8]], ([[UInt8]]) throws -> Void)] = [
            (
                "client REQUEST", ClientToBroker.packedRequest(Self.request).encode(),
                { _ = try ClientToBroker.decode($0) }
            ),
            (
                "client REPLY",
                BrokerToClient.packedReply(TaskReply(requestID: Self.id, status: .ok, body: [1])).encode(),
                { _ = try BrokerToClient.decode($0) }
            ),
            (
                "worker REQUEST", BrokerToWorker.packedRequest(tag: Self.tag, Self.request).encode(),
                { _ = try BrokerToWorker.decode($0) }
            ),
            (
                "worker REPLY",
                WorkerToBroker.packedReply(tag: Self.tag, TaskReply(requestID: Self.id, status: .ok, body: [1]))
                    .encode(),
                { _ = try WorkerToBroker.decode($0) }
            ),
        ]
        for (name, frames, decode) in packed {
            #expect(throws: Never.self, "\(name) as sent") { try decode(frames) }
            for index in 0..<6 {
                var wrong = frames
                wrong[0][index] ^= 0x20
                #expect(throws: ProtocolError.self, "\(name), signature byte \(index) wrong") { try decode(wrong) }
            }
        }
    }

    /// Workers get attempt and timeout only, in either form: the packed REQUEST decodes to the
    /// request the framed one decodes to.
    @Test func aWorkerRequestCarriesWhatTheFramedOneCarries() throws {
        var request = Self.request
        request.header.noWorkersGraceMilliseconds = 500
        request.header.priority = -3
        request.trace = Array("traceparent: 00-abc-def-01".utf8)
        guard
            case .request(_, let framed) = try BrokerToWorker.decode(BrokerToWorker.request(tag: [1], request).encode()),
            case .packedRequest(let tag, let packed) = try BrokerToWorker.decode(
                BrokerToWorker.packedRequest(tag: [1], request).encode())
        else {
            Issue.record("a REQUEST decoded to another command")
            return
        }
        #expect(tag == [1])
        #expect(packed == framed)
        #expect(packed.trace == request.trace)
        #expect(packed.header == RequestHeader(attempt: 3, timeoutMilliseconds: 2500))
    }

    @Test func aWorkerReplyIsAHeaderAndABody() throws {
        for status in ReplyStatus.allCases {
            let command = WorkerToBroker.packedReply(
                tag: Self.tag, TaskReply(requestID: Self.id, status: status, body: [9, 8]))
            let frames = command.encode()
            #expect(
                frames == [
                    Array("SKYW02".utf8) + [0x03] + Self.idBytes + [status.rawValue] + Self.tag.bytes.array, [9, 8],
                ])
            #expect(try WorkerToBroker.decode(frames) == command)
            #expect(try WorkerToBroker.decode(command.frames()) == command)
        }
    }

    /// The broker's sends: the routing id, then the same frames.
    @Test func aRoutedPackedRequestIsTheRoutingIDThenThePlainFrames() throws {
        let routing: [UInt8] = [0, 0x6b, 0x8b, 0x45, 0x67]
        var traced = Self.request
        traced.trace = Array("traceparent: 00-abc-def-01".utf8)
        for request in [Self.request, traced] {
            let command = BrokerToWorker.packedRequest(tag: Self.tag, request)
            #expect(command.frames(routedTo: routing).arrays == [routing] + command.encode())
            #expect(try BrokerToWorker.decode(command.frames(routedTo: routing).dropFirst()) == command)
        }
        // A body of 1 KiB or more is kept by reference, as in the framed form.
        var large = Self.request
        large.body = Array(repeating: 7, count: 70_000)
        let frames = BrokerToWorker.packedRequest(tag: Self.tag, large).frames()
        #expect(frames.arrays[1] == large.body)
    }

    /// Request headers after `SKYW02 0x02`, each broken in one way.
    static let brokenRequestFields: [(String, [UInt8])] = {
        let attempt: [UInt8] = [0, 0, 0, 3]
        let timeout: [UInt8] = [0, 0, 0, 0]
        let fixed: [UInt8] = idBytes + attempt + timeout
        let tagged: [UInt8] = fixed + [1, 7]
        let longName = [UInt8](repeating: 0x61, count: 256)
        return [
            ("nothing after the signature and command", []),
            ("a short request id", Array(1...15)),
            ("no attempt", idBytes),
            ("a short timeout", idBytes + attempt + [0, 0]),
            ("no tag length", fixed),
            ("a tag length of 0", fixed + [0, 0x73]),
            ("a tag past the end", fixed + [9, 1, 2]),
            ("no service name", tagged),
            ("a service name with a newline", tagged + [0x61, 0x0a]),
            ("a service name that is not UTF-8", tagged + [0xff]),
            ("a service name of 256 bytes", tagged + longName),
        ]
    }()

    @Test(arguments: brokenRequestFields)
    func aBrokenRequestHeaderIsATypedError(_ what: String, _ fields: [UInt8]) {
        let header = Array("SKYW02".utf8) + [0x02] + fields
        #expect(throws: ProtocolError.self, "\(what)") { try BrokerToWorker.decode([header, [1]]) }
    }

    @Test func aRequestOfTheWrongFrameCountOrCommandIsATypedError() throws {
        let frames = BrokerToWorker.packedRequest(tag: Self.tag, Self.request).encode()
        #expect(throws: ProtocolError.self) { try BrokerToWorker.decode([frames[0]]) }
        #expect(throws: ProtocolError.self) { try BrokerToWorker.decode(frames + [[1], [2]]) }
        // A trace frame must be 1...1024 bytes, as in the framed form.
        #expect(throws: ProtocolError.self) { try BrokerToWorker.decode(frames + [[]]) }
        // Only REQUEST is packed towards a worker; HEARTBEAT and the others keep their frames.
        var heartbeat = frames[0]
        heartbeat[6] = 0x04
        #expect(throws: ProtocolError.unknownCommand(0x04)) { try BrokerToWorker.decode([heartbeat, []]) }
        // A REPLY header is not a REQUEST, and a worker's signature is not a client's.
        let reply = WorkerToBroker.packedReply(tag: Self.tag, TaskReply(requestID: Self.id, status: .ok, body: []))
        #expect(throws: ProtocolError.self) { try BrokerToWorker.decode(reply.encode()) }
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode(frames) }
    }

    @Test func aBrokenReplyHeaderIsATypedError() throws {
        let good = WorkerToBroker.packedReply(tag: Self.tag, TaskReply(requestID: Self.id, status: .ok, body: []))
            .encode()
        let header = good[0]
        // Every cut of the header short of its last byte: no tag, or less.
        for length in 6...(header.count - Self.tag.count) {
            #expect(throws: ProtocolError.self, "cut at \(length)") {
                try WorkerToBroker.decode([Array(header.prefix(length)), []])
            }
        }
        // A tag of 256 bytes, three frames, one frame.
        #expect(throws: ProtocolError.self) {
            try WorkerToBroker.decode([header + Array(repeating: 1, count: 248), []])
        }
        // A status this edition does not know is a failure, read as internalError (statuses
        // are only ever added), not a malformed message.
        var status = header
        status[23] = 200
        guard case .packedReply(_, let unknown)? = try? WorkerToBroker.decode([status, []]) else {
            Issue.record("a reply with status 200 was not read")
            return
        }
        #expect(unknown.status == .internalError)
        #expect(RemoteErrorBody(decoding: unknown.body).type == ReplyStatus.unknownStatusType)
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode(good + [[]]) }
        #expect(throws: ProtocolError.self) { try WorkerToBroker.decode([header]) }
        var command = header
        command[6] = 0x01
        #expect(throws: ProtocolError.unknownCommand(0x01)) { try WorkerToBroker.decode([command, []]) }
    }

    /// Random headers after the packed signatures, and every prefix of valid ones, decode to a
    /// value or a typed error; none traps.
    @Test func randomPackedHeadersNeverTrap() {
        var random = SplitMix64(seed: 20_261_126)
        let valid = [
            BrokerToWorker.packedRequest(tag: Self.tag, Self.request).encode()[0],
            WorkerToBroker.packedReply(tag: Self.tag, TaskReply(requestID: Self.id, status: .ok, body: [])).encode()[0],
        ]
        for _ in 0..<20_000 {
            let signature = Array((random.next() % 2 == 0 ? "SKYW02" : "SKYC02").utf8)
            let length = Int(random.next() % 80)
            var header = signature + (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            if random.next() % 3 == 0, let base = valid.randomElement(using: &random) {
                header = Array(base.prefix(Int(random.next() % UInt64(base.count + 1))))
            }
            let frames = [header] + Array(repeating: [UInt8](), count: Int(random.next() % 4))
            _ = try? BrokerToWorker.decode(frames)
            _ = try? WorkerToBroker.decode(frames)
            _ = try? ClientToBroker.decode(frames)
            _ = try? BrokerToClient.decode(frames)
        }
    }

    @Test func theBrokersFeaturesSayPacked() {
        let features = BrokerFeatures(maxFrameSize: 65_536, takesPacked: true)
        #expect(features.lines == ["max-frame-size=65536", "packed"])
        #expect(BrokerFeatures(lines: features.lines) == features)
        #expect(BrokerFeatures(lines: ["max-frame-size=65536"]).takesPacked == false)
    }
}

/// The client link's packed forms.
@Suite("Protocol codec: packed client messages")
struct PackedClientCodecTests {
    static let id = PackedCodecTests.id
    static let idBytes = PackedCodecTests.idBytes

    @Test func aClientRequestIsAHeaderAndABodyWithEveryField() throws {
        var request = PackedCodecTests.request
        request.header.noWorkersGraceMilliseconds = 0x0102_0304
        request.header.priority = -2
        let command = ClientToBroker.packedRequest(request)
        let frames = command.encode()
        let fixed: [UInt8] = [0, 0, 0, 3] + [0, 0, 0x09, 0xc4] + [1, 2, 3, 4] + [0xff, 0xff, 0xff, 0xfe]
        #expect(frames[0] == Array("SKYC02".utf8) + [0x01] + Self.idBytes + fixed + Array("sky.scan".utf8))
        #expect(frames.count == 2 && frames[1] == request.body)
        #expect(try ClientToBroker.decode(frames) == command)
        // The same fields as the framed form carries.
        guard case .request(let framed) = try ClientToBroker.decode(ClientToBroker.request(request).encode()) else {
            Issue.record("the framed REQUEST decoded to another command")
            return
        }
        #expect(framed == request)
        var traced = request
        traced.trace = Array("traceparent: 00-abc-def-01".utf8)
        #expect(try ClientToBroker.decode(ClientToBroker.packedRequest(traced).encode()) == .packedRequest(traced))
    }

    /// A priority beyond -128...127 is clamped, as in the framed form's 16-byte header.
    @Test func aPriorityOutOfRangeIsClampedAndAttemptZeroIsRefused() throws {
        var header = ClientToBroker.packedRequest(PackedCodecTests.request).encode()[0]
        header.replaceSubrange(35..<39, with: [0, 0, 1, 0])
        guard case .packedRequest(let request) = try ClientToBroker.decode([header, []]) else {
            Issue.record("expected a packed REQUEST")
            return
        }
        #expect(request.header.priority == 127)
        header.replaceSubrange(23..<27, with: [0, 0, 0, 0])
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode([header, []]) }
    }

    @Test func aClientReplyIsAHeaderAndABody() throws {
        for status in ReplyStatus.allCases {
            let command = BrokerToClient.packedReply(
                TaskReply(requestID: Self.id, attempt: 7, status: status, body: [5]))
            let frames = command.encode()
            #expect(frames == [Array("SKYC02".utf8) + [0x02] + Self.idBytes + [0, 0, 0, 7, status.rawValue], [5]])
            #expect(try BrokerToClient.decode(frames) == command)
            let routing: [UInt8] = [0, 1, 2, 3, 4]
            #expect(command.frames(routedTo: routing).arrays == [routing] + frames)
        }
    }

    @Test func brokenClientHeadersAreTypedErrors() throws {
        let request = ClientToBroker.packedRequest(PackedCodecTests.request).encode()
        // Every cut short of the service name, and no service name at all.
        for length in 6..<(request[0].count - "sky.scan".utf8.count + 1) {
            #expect(throws: ProtocolError.self, "cut at \(length)") {
                try ClientToBroker.decode([Array(request[0].prefix(length)), []])
            }
        }
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode([request[0]]) }
        #expect(throws: ProtocolError.self) { try ClientToBroker.decode(request + [[1], [2]]) }
        // CANCEL has no packed form.
        var cancel = request[0]
        cancel[6] = 0x03
        #expect(throws: ProtocolError.unknownCommand(0x03)) { try ClientToBroker.decode([cancel, []]) }
        let reply = BrokerToClient.packedReply(TaskReply(requestID: Self.id, attempt: 1, status: .ok, body: []))
            .encode()
        for length in 6..<reply[0].count {
            #expect(throws: ProtocolError.self, "cut at \(length)") {
                try BrokerToClient.decode([Array(reply[0].prefix(length)), []])
            }
        }
        #expect(throws: ProtocolError.self) { try BrokerToClient.decode([reply[0] + [0], []]) }
        #expect(throws: ProtocolError.self) { try BrokerToClient.decode(reply + [[]]) }
    }
}
