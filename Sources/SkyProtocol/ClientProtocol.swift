import SkyWire

/// Commands a client sends to the broker (signature "SKYC01").
public enum ClientToBroker: Sendable, Equatable {
    /// `[SKYC01][0x01][request-id][service][header][body]([trace])`: run a task. The trace
    /// frame goes only to a broker whose `mmi.features` names ``TraceContext/feature``.
    case request(TaskRequest)
    /// `[SKYC02 0x01 request-id attempt timeout-ms no-workers-ms priority service][body]([trace])`:
    /// the same REQUEST packed into a header and a body frame, sent only to a broker whose
    /// `mmi.features` names ``WireFormat/packedFeature``.
    case packedRequest(TaskRequest)
    /// `[SKYC01][0x03][request-id]`: the caller no longer wants this request.
    case cancel(RequestID)

    public enum Command: UInt8 {
        case request = 0x01
        case cancel = 0x03
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> ClientToBroker {
        try decode(Frames(frames))
    }

    public static func decode(_ frames: Frames) throws(ProtocolError) -> ClientToBroker {
        var names = NameCache()
        return try decode(frames, names: &names)
    }

    /// ``decode(_:)-(Frames)`` of a packed REQUEST's service name through `names` (the broker's,
    /// which reads the same few names over and over).
    package static func decode(_ frames: Frames, names: inout NameCache) throws(ProtocolError) -> ClientToBroker {
        if var header = try WireFormat.packedFields(
            of: frames, signature: WireFormat.packedClientSignature, command: Command.request.rawValue,
            name: "packed REQUEST", frameCounts: 2...3)
        {
            let requestID = try header.requestID()
            let attempt = try header.uint32("attempt")
            // 0 names the answer to a CANCEL; a request's attempts count from 1.
            guard attempt >= 1 else { throw .invalidValue(name: "attempt", reason: "0; attempts count from 1") }
            let timeout = try header.uint32("timeout")
            let grace = try header.uint32("grace")
            let priority = Int8(clamping: Int32(bitPattern: try header.uint32("priority")))
            let service = try header.remainingName(&names)
            let body = frames.array(1)
            return .packedRequest(
                TaskRequest(
                    requestID: requestID, service: service,
                    header: RequestHeader(
                        attempt: attempt, timeoutMilliseconds: timeout, noWorkersGraceMilliseconds: grace,
                        priority: priority),
                    body: body, trace: frames.count == 3 ? try WireFormat.traceFrame(frames[2]) : nil))
        }
        let byte = try WireFormat.command(of: frames, signature: WireFormat.clientSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .request:
            guard frames.count == 6 || frames.count == 7 else {
                throw .wrongFrameCount(command: "REQUEST", expected: "6 or 7", actual: frames.count)
            }
            let header = frames[4]
            let keyed = header.count > RequestHeader.flaggedByteCount
            if !keyed && !RequestHeader.unkeyedByteCounts.contains(header.count) {
                throw RequestHeader.clientHeaderLength(header.count)
            }
            let (key, limit) =
                keyed ? try RequestHeader.concurrency(header.dropFirst(RequestHeader.flaggedByteCount)) : (nil, 0)
            let request = TaskRequest(
                requestID: try RequestID(frame: frames[2]),
                service: try WireFormat.name(frames[3]),
                header: try RequestHeader(frame: keyed ? header.prefix(RequestHeader.flaggedByteCount) : header),
                body: Array(frames[5]),
                trace: frames.count == 7 ? try WireFormat.traceFrame(frames[6]) : nil, concurrencyKey: key,
                concurrencyLimit: limit)
            // 0 names the answer to a CANCEL; a request's attempts count from 1.
            guard request.header.attempt >= 1 else {
                throw .invalidValue(name: "attempt", reason: "0; attempts count from 1")
            }
            return .request(request)
        case .cancel:
            try WireFormat.expectFrames(frames, 3, command: "CANCEL")
            return .cancel(try RequestID(frame: frames[2]))
        }
    }

    public func encode() -> [[UInt8]] { frames().arrays }

    /// Lends a packed REQUEST to `use` as ``FrameParts``, sent with no buffer of its own;
    /// false, and `use` not called, for any other command (then ``frames()``).
    public func lendParts(_ use: (FrameParts) -> Void) -> Bool {
        guard case .packedRequest(let request) = self else { return false }
        Self.lendPackedRequest(request, use)
        return true
    }

    /// ``lendParts(_:)`` of `.packedRequest(request)`, for a sender that holds the request
    /// itself: taking it out of the enum copied it (its references counted up and down).
    public static func lendPackedRequest(_ request: TaskRequest, _ use: (FrameParts) -> Void) {
        // The closure takes the fields it writes, not the request: capturing it copied it.
        let (header, service) = (request.header, request.service)
        FrameParts.lendPacked(
            WireFormat.packedClientSignature, command: Command.request.rawValue, request.requestID,
            fieldBytes: 16 + service.utf8.count, routedTo: nil, body: request.body[...], trailer: request.trace,
            fields: { writePackedFields(&$0, header, service) }, to: use)
    }

    /// A packed REQUEST's fields after its request id.
    private static func writePackedFields(_ fields: inout PackedFieldWriter, _ request: TaskRequest) {
        writePackedFields(&fields, request.header, request.service)
    }

    private static func writePackedFields(_ fields: inout PackedFieldWriter, _ header: RequestHeader, _ service: String)
    {
        fields.bigEndian(header.attempt)
        fields.bigEndian(header.timeoutMilliseconds)
        fields.bigEndian(header.noWorkersGraceMilliseconds)
        fields.bigEndian(UInt32(bitPattern: Int32(header.priority)))
        fields.utf8(service)
    }

    /// The message in one buffer: a REQUEST, once per call, is written there directly.
    public func frames() -> Frames {
        switch self {
        case .packedRequest(let request):
            let signature = WireFormat.packedClientSignature
            let trace = request.trace
            var writer = Frames.Writer(
                frames: trace == nil ? 2 : 3,
                bytes: signature.count + 1 + RequestID.byteCount + 16 + request.service.utf8.count
                    + Frames.inlineSize(request.body.count) + Frames.inlineSize(trace?.count ?? 0))
            writer.appendPacked(
                signature, command: Command.request.rawValue, request.requestID,
                fieldBytes: 16 + request.service.utf8.count
            ) { Self.writePackedFields(&$0, request) }
            writer.append(request.body)
            if let trace { writer.append(trace) }
            return writer.finish()
        case .request(let request):
            let trace = request.trace
            let (grace, priority, flags) = request.header.optionalFields
            let key = request.concurrencyKey
            var writer = Frames.Writer(
                frames: trace == nil ? 6 : 7,
                bytes: WireFormat.clientSignature.count + 1 + RequestID.byteCount + request.service.utf8.count
                    + RequestHeader.flaggedByteCount + Frames.inlineSize(request.body.count)
                    + Frames.inlineSize(trace?.count ?? 0) + Frames.inlineSize(5 + (key?.utf8.count ?? 0)))
            writer.append(WireFormat.clientSignature)
            writer.append(byte: Command.request.rawValue)
            writer.append(request.requestID)
            writer.append(utf8: request.service)
            if let key {
                writer.append(request.header.keyedFrame(key: key, limit: request.concurrencyLimit))
            } else {
                writer.append(
                    bigEndian: request.header.attempt, request.header.timeoutMilliseconds, grace, priority, flags)
            }
            writer.append(request.body)
            if let trace { writer.append(trace) }
            return writer.finish()
        case .cancel(let requestID):
            var writer = Frames.Writer(frames: 3, bytes: WireFormat.clientSignature.count + 1 + RequestID.byteCount)
            writer.append(WireFormat.clientSignature)
            writer.append(byte: Command.cancel.rawValue)
            writer.append(requestID)
            return writer.finish()
        }
    }
}

/// Commands the broker sends to a client (signature "SKYC01").
public enum BrokerToClient: Sendable, Equatable {
    /// `[SKYC01][0x02][request-id][attempt][status][body]`: the one reply to a request.
    case reply(TaskReply)
    /// `[SKYC02 0x02 request-id attempt status][body]`: the same REPLY packed into a header and
    /// a body frame, for a client whose REQUESTs come packed.
    case packedReply(TaskReply)

    public enum Command: UInt8 {
        case reply = 0x02
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> BrokerToClient {
        try decode(Frames(frames))
    }

    public static func decode(_ frames: Frames) throws(ProtocolError) -> BrokerToClient {
        if var header = try WireFormat.packedFields(
            of: frames, signature: WireFormat.packedClientSignature, command: Command.reply.rawValue,
            name: "packed REPLY", frameCounts: 2...2)
        {
            let requestID = try header.requestID()
            let attempt = try header.uint32("attempt")
            let byte = try header.statusByte()
            try header.end()
            guard let status = ReplyStatus(rawValue: byte) else {
                let (status, body) = ReplyStatus.received(byte, body: frames[1])
                return .packedReply(
                    TaskReply(requestID: requestID, attempt: attempt, status: status, body: Array(body)))
            }
            let body = frames.array(1)
            return .packedReply(TaskReply(requestID: requestID, attempt: attempt, status: status, body: body))
        }
        let byte = try WireFormat.command(of: frames, signature: WireFormat.clientSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .reply:
            try WireFormat.expectFrames(frames, 6, command: "REPLY")
            let byte = try ReplyStatus.byte(of: frames[4])
            return .reply(
                ReplyStatus.reply(
                    try RequestID(frame: frames[2]), attempt: try WireFormat.uint32(frames[3], name: "attempt"),
                    byte: byte, body: 5, of: frames))
        }
    }

    public func encode() -> [[UInt8]] { frames().arrays }

    /// The message in one buffer, after the routing-id frame `routingID`.
    public func frames(routedTo routingID: [UInt8]) -> Frames {
        routingID.withUnsafeBytes { frames(routedTo: $0) }
    }

    /// Lends a packed REPLY to `use` as ``FrameParts``, after a ROUTER's routing-id frame when
    /// one is given, sent with no buffer of its own; false, and `use` not called, for any other
    /// command (then ``frames(routedTo:)``).
    public func lendParts(
        routedTo routingID: UnsafeRawBufferPointer?, _ use: (FrameParts) -> Void
    ) -> Bool {
        guard case .packedReply(let reply) = self else { return false }
        Self.lendPackedReply(
            reply.requestID, attempt: reply.attempt, reply.status, body: reply.bodyBytes, routedTo: routingID, use)
        return true
    }

    /// ``lendParts(routedTo:_:)`` of `.packedReply(reply)` from the reply's fields, for a sender
    /// that holds the reply itself: taking it out of the enum copied it, and lending it from
    /// the whole reply made the compiler copy it too (its body's reference counted up and down).
    public static func lendPackedReply(
        _ requestID: RequestID, attempt: UInt32, _ status: ReplyStatus, body: ArraySlice<UInt8>,
        routedTo routingID: UnsafeRawBufferPointer?, _ use: (FrameParts) -> Void
    ) {
        FrameParts.lendPacked(
            WireFormat.packedClientSignature, command: Command.reply.rawValue, requestID, fieldBytes: 5,
            routedTo: routingID, body: body, trailer: nil,
            fields: { writePackedFields(&$0, attempt: attempt, status) }, to: use)
    }

    /// A packed REPLY's fields after its request id: the attempt and the status.
    private static func writePackedFields(_ fields: inout PackedFieldWriter, _ reply: TaskReply) {
        writePackedFields(&fields, attempt: reply.attempt, reply.status)
    }

    private static func writePackedFields(_ fields: inout PackedFieldWriter, attempt: UInt32, _ status: ReplyStatus) {
        fields.bigEndian(attempt)
        fields.byte(status.rawValue)
    }

    /// The message in one buffer, after a ROUTER's routing-id frame when one is given (the
    /// broker's one reply per request); the id is borrowed, as in `BrokerToWorker`.
    public func frames(routedTo routingID: UnsafeRawBufferPointer? = nil) -> Frames {
        switch self {
        case .packedReply(let reply):
            let signature = WireFormat.packedClientSignature
            var writer = Frames.Writer(
                frames: routingID == nil ? 2 : 3,
                bytes: (routingID?.count ?? 0) + signature.count + 1 + RequestID.byteCount + 4 + 1
                    + Frames.inlineSize(reply.bodyBytes.count))
            if let routingID { writer.append(routingID) }
            writer.appendPacked(signature, command: Command.reply.rawValue, reply.requestID, fieldBytes: 5) {
                Self.writePackedFields(&$0, reply)
            }
            writer.append(reply.bodyBytes)
            return writer.finish()
        case .reply(let reply):
            var writer = Frames.Writer(
                frames: routingID == nil ? 6 : 7,
                bytes: (routingID?.count ?? 0) + WireFormat.clientSignature.count + 1 + RequestID.byteCount + 4 + 1
                    + Frames.inlineSize(reply.bodyBytes.count))
            if let routingID { writer.append(routingID) }
            writer.append(WireFormat.clientSignature)
            writer.append(byte: Command.reply.rawValue)
            writer.append(reply.requestID)
            writer.append(bigEndian: reply.attempt)
            writer.append(byte: reply.status.rawValue)
            writer.append(reply.bodyBytes)
            return writer.finish()
        }
    }
}
