import SkyWire

/// What a worker tells the broker when it joins.
public struct WorkerAnnouncement: Sendable, Equatable {
    /// A name for humans (host and pid by default); not required to be unique.
    public var name: String
    /// How many tasks the broker may have outstanding at this worker at once (its credits).
    public var capacity: UInt32
    /// The services it runs, at least one.
    public var services: [String]

    public init(name: String, capacity: UInt32, services: [String]) {
        self.name = name
        self.capacity = capacity
        self.services = services
    }
}

/// Commands a worker sends to the broker (signature "SKYW01").
public enum WorkerToBroker: Sendable, Equatable {
    /// `[SKYW01][0x01][name][capacity][service]...`: join with a capacity and services.
    case ready(WorkerAnnouncement)
    /// `[SKYW01][0x03][tag][request-id][status][body]`: the outcome of a task; `tag` is the
    /// delivery tag of the REQUEST it answers, echoed unchanged.
    case reply(tag: DeliveryTag, TaskReply)
    /// `[SKYW02 0x03 request-id status tag][body]`: the same outcome packed into a header and
    /// a body frame, sent only to a broker whose FEATURES named ``WireFormat/packedFeature``.
    case packedReply(tag: DeliveryTag, TaskReply)
    /// `[SKYW01][0x04]`: still alive.
    case heartbeat
    /// `[SKYW01][0x05]`: leaving; the broker sends nothing more.
    case disconnect
    /// `[SKYW01][0x07]`: stopping; send no new tasks, the ones held will be answered.
    case draining
    /// `[SKYW01][0x09][feature]...`: after READY, what else this worker understands (so far
    /// ``TraceContext/feature``: REQUESTs may carry a trace frame). A broker that predates it
    /// drops it as an unknown command, and sends plain REQUESTs.
    case features([String])
    /// `[SKYW01][0x0A][tag][request-id][fraction][message][lines]`: what the handler of the
    /// delivery `tag` said of its progress since its last PROGRESS (``ProgressReport``), sent
    /// only to a broker whose FEATURES named ``ProgressReport/feature``, and before the task's
    /// REPLY.
    case progress(tag: DeliveryTag, RequestID, ProgressReport)

    public enum Command: UInt8 {
        case ready = 0x01
        case reply = 0x03
        case heartbeat = 0x04
        case disconnect = 0x05
        case draining = 0x07
        case features = 0x09
        case progress = 0x0A
    }

    /// Most features one FEATURES may name (either way).
    public static let maxFeatures = 32

    /// Largest capacity a worker may announce.
    public static let maxCapacity: UInt32 = 65_536
    /// The default heartbeat interval, both ways, and the silent intervals after which a peer
    /// counts as gone: the broker's and the worker's defaults, defined once.
    public static let defaultHeartbeatInterval: Duration = .seconds(1)
    public static let defaultLiveness = 3
    /// Most services one READY may name.
    public static let maxServices = 1024
    /// Frames of a READY naming ``maxServices`` services.
    public static let maxReadyFrames = 4 + maxServices

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> WorkerToBroker {
        try decode(Frames(frames))
    }

    public static func decode(_ frames: Frames) throws(ProtocolError) -> WorkerToBroker {
        if var header = try WireFormat.packedFields(
            of: frames, signature: WireFormat.packedWorkerSignature, command: Command.reply.rawValue,
            name: "packed REPLY", frameCounts: 2...2)
        {
            let requestID = try header.requestID()
            let byte = try header.statusByte()
            let tag = try header.remainingTag()
            return .packedReply(tag: tag, ReplyStatus.reply(requestID, byte: byte, body: 1, of: frames))
        }
        let byte = try WireFormat.command(of: frames, signature: WireFormat.workerSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .ready:
            guard frames.count >= 5 else {
                throw .wrongFrameCount(command: "READY", expected: "5 or more", actual: frames.count)
            }
            guard frames.count <= maxReadyFrames else {
                throw .wrongFrameCount(
                    command: "READY", expected: "at most \(maxReadyFrames) (\(maxServices) services)",
                    actual: frames.count)
            }
            let name = try WireFormat.name(frames[2], of: "worker name")
            let capacity = try WireFormat.uint32(frames[3], name: "capacity")
            guard capacity >= 1, capacity <= maxCapacity else {
                throw .invalidValue(name: "capacity", reason: "\(capacity) is outside 1...\(maxCapacity)")
            }
            var services: [String] = []
            for index in 4..<frames.count { services.append(try WireFormat.name(frames[index])) }
            return .ready(WorkerAnnouncement(name: name, capacity: capacity, services: services))
        case .reply:
            try WireFormat.expectFrames(frames, 6, command: "REPLY")
            let byte = try ReplyStatus.byte(of: frames[4])
            return .reply(
                tag: try WireFormat.deliveryTag(frames[2]),
                ReplyStatus.reply(try RequestID(frame: frames[3]), byte: byte, body: 5, of: frames))
        case .heartbeat:
            try WireFormat.expectFrames(frames, 2, command: "HEARTBEAT")
            return .heartbeat
        case .disconnect:
            try WireFormat.expectFrames(frames, 2, command: "DISCONNECT")
            return .disconnect
        case .draining:
            try WireFormat.expectFrames(frames, 2, command: "DRAINING")
            return .draining
        case .features:
            return .features(try WireFormat.featureNames(frames))
        case .progress:
            try WireFormat.expectFrames(frames, 7, command: "PROGRESS")
            return .progress(
                tag: try WireFormat.deliveryTag(frames[2]), try RequestID(frame: frames[3]),
                try ProgressReport.decodeFields(frames[4], frames[5], frames[6]))
        }
    }

    public func encode() -> [[UInt8]] {
        switch self {
        case .reply, .packedReply: return frames().arrays
        default: break
        }
        let signature = WireFormat.workerSignature
        switch self {
        case .draining:
            return [signature, [Command.draining.rawValue]]
        case .features(let names):
            return [signature, [Command.features.rawValue]] + names.map { Array($0.utf8) }
        case .progress(let tag, let requestID, let report):
            return [signature, [Command.progress.rawValue], tag.bytes.array, requestID.frame] + report.encodeFields()
        case .ready(let announcement):
            return [
                signature, [Command.ready.rawValue], Array(announcement.name.utf8),
                WireFormat.bytes(announcement.capacity),
            ] + announcement.services.map { Array($0.utf8) }
        case .reply, .packedReply:
            preconditionFailure("frames() builds a REPLY")
        case .heartbeat:
            return [signature, [Command.heartbeat.rawValue]]
        case .disconnect:
            return [signature, [Command.disconnect.rawValue]]
        }
    }

    /// The message in one buffer: a REPLY, once per task, is written there directly. Consumed:
    /// matching a borrowed command copied its tag and reply through the runtime's generic tuple
    /// witness on every task.
    public consuming func frames() -> Frames {
        switch consume self {
        case .packedReply(let tag, let reply):
            let signature = WireFormat.packedWorkerSignature
            var writer = Frames.Writer(
                frames: 2,
                bytes: signature.count + 1 + RequestID.byteCount + 1 + tag.count
                    + Frames.inlineSize(reply.bodyBytes.count))
            writer.appendPacked(
                signature, command: Command.reply.rawValue, reply.requestID, fieldBytes: 1 + tag.count
            ) { Self.writePackedFields(&$0, tag: tag, reply.status) }
            writer.append(reply.bodyBytes)
            return writer.finish()
        case .reply(let tag, let reply):
            var writer = Frames.Writer(
                frames: 6,
                bytes: WireFormat.workerSignature.count + 1 + tag.count + RequestID.byteCount + 1
                    + Frames.inlineSize(reply.bodyBytes.count))
            writer.append(WireFormat.workerSignature)
            writer.append(byte: Command.reply.rawValue)
            tag.withBytes { writer.append($0) }
            writer.append(reply.requestID)
            writer.append(byte: reply.status.rawValue)
            writer.append(reply.bodyBytes)
            return writer.finish()
        case let other:
            return Frames(other.encode())
        }
    }

    /// Lends a packed REPLY to `use` as ``FrameParts``, sent with no buffer of its own; false,
    /// and `use` not called, for any other command (then ``frames()``).
    public func lendParts(_ use: (FrameParts) -> Void) -> Bool {
        guard case .packedReply(let tag, let reply) = self else { return false }
        Self.lendPackedReply(tag: tag, reply.requestID, reply.status, body: reply.bodyBytes, use)
        return true
    }

    /// ``lendParts(_:)`` of `.packedReply(tag:reply)` from the reply's fields, for a sender that
    /// holds the reply itself: taking it out of the enum copied it, and lending it from the
    /// whole reply made the compiler copy it too (its body's reference counted up and down).
    public static func lendPackedReply(
        tag: DeliveryTag, _ requestID: RequestID, _ status: ReplyStatus, body: ArraySlice<UInt8>,
        _ use: (FrameParts) -> Void
    ) {
        FrameParts.lendPacked(
            WireFormat.packedWorkerSignature, command: Command.reply.rawValue, requestID,
            fieldBytes: 1 + tag.count, routedTo: nil, body: body, trailer: nil,
            fields: { writePackedFields(&$0, tag: tag, status) }, to: use)
    }

    /// A packed REPLY's fields after its request id: the status and the delivery's tag.
    private static func writePackedFields(_ fields: inout PackedFieldWriter, tag: DeliveryTag, _ status: ReplyStatus) {
        fields.byte(status.rawValue)
        tag.withBytes { fields.bytes($0) }
    }
}

/// Commands the broker sends to a worker (signature "SKYW01").
public enum BrokerToWorker: Sendable, Equatable {
    /// `[SKYW01][0x02][tag][request-id][service][header][body]([trace])`: run this task (the
    /// trace frame only to a worker that announced ``TraceContext/feature``). `tag` names this
    /// delivery (opaque, chosen by the broker): the worker echoes it in the REPLY and the broker
    /// names it in a CANCEL, so a late reply to an earlier delivery of the same request is told
    /// apart from the current one.
    case request(tag: DeliveryTag, TaskRequest)
    /// `[SKYW02 0x02 request-id attempt timeout-ms tag-length tag service][body]([trace])`: the
    /// same REQUEST packed into a header and a body frame, sent only to a worker whose FEATURES
    /// named ``WireFormat/packedFeature``.
    case packedRequest(tag: DeliveryTag, TaskRequest)
    /// `[SKYW01][0x04]`: the broker is alive.
    case heartbeat
    /// `[SKYW01][0x05]`: the broker no longer knows this worker; re-register on a new socket.
    case disconnect
    /// `[SKYW01][0x06][tag][request-id]`: stop running this delivery; its result is not wanted.
    case cancel(tag: DeliveryTag, RequestID)
    /// `[SKYW01][0x07]`: DRAINING acknowledged; no task is sent after this.
    case drainingAcknowledged
    /// `[SKYW01][0x08][reason]`: the broker will not serve this peer as a worker (its READY is
    /// invalid, or it connected to the wrong endpoint). The worker reports the reason and stops:
    /// registering again would be refused the same way.
    case refused(reason: String)
    /// `[SKYW01][0x09][line]...`: what the broker says of itself (``BrokerFeatures``), sent
    /// after each READY it accepts. So far `max-frame-size=N`: a REPLY whose body is larger
    /// would close the worker's connection, so the worker answers such a task with a failure
    /// instead. Lines a worker does not know, it skips.
    case features([String])

    public enum Command: UInt8 {
        case request = 0x02
        case heartbeat = 0x04
        case disconnect = 0x05
        case cancel = 0x06
        case drainingAcknowledged = 0x07
        case refused = 0x08
        case features = 0x09
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> BrokerToWorker {
        try decode(Frames(frames))
    }

    public static func decode(_ frames: Frames) throws(ProtocolError) -> BrokerToWorker {
        var names = NameCache()
        return try decode(frames, names: &names)
    }

    /// ``decode(_:)-(Frames)`` of a packed REQUEST's service name through `names` (the worker's,
    /// which reads the same few names over and over).
    package static func decode(_ frames: Frames, names: inout NameCache) throws(ProtocolError) -> BrokerToWorker {
        if var header = try WireFormat.packedFields(
            of: frames, signature: WireFormat.packedWorkerSignature, command: Command.request.rawValue,
            name: "packed REQUEST", frameCounts: 2...3)
        {
            let requestID = try header.requestID()
            let attempt = try header.uint32("attempt")
            let timeout = try header.uint32("timeout")
            let tag = try header.lengthPrefixedTag()
            let service = try header.remainingName(&names)
            let body = frames.array(1)
            return .packedRequest(
                tag: tag,
                TaskRequest(
                    requestID: requestID, service: service,
                    header: RequestHeader(attempt: attempt, timeoutMilliseconds: timeout), body: body,
                    trace: frames.count == 3 ? try WireFormat.traceFrame(frames[2]) : nil))
        }
        let byte = try WireFormat.command(of: frames, signature: WireFormat.workerSignature)
        guard let command = Command(rawValue: byte) else { throw .unknownCommand(byte) }
        switch command {
        case .request:
            guard frames.count == 7 || frames.count == 8 else {
                throw .wrongFrameCount(command: "REQUEST", expected: "7 or 8", actual: frames.count)
            }
            return .request(
                tag: try WireFormat.deliveryTag(frames[2]),
                TaskRequest(
                    requestID: try RequestID(frame: frames[3]),
                    service: try WireFormat.name(frames[4]),
                    header: try RequestHeader(frame: frames[5]),
                    body: Array(frames[6]),
                    trace: frames.count == 8 ? try WireFormat.traceFrame(frames[7]) : nil))
        case .heartbeat:
            try WireFormat.expectFrames(frames, 2, command: "HEARTBEAT")
            return .heartbeat
        case .disconnect:
            try WireFormat.expectFrames(frames, 2, command: "DISCONNECT")
            return .disconnect
        case .cancel:
            try WireFormat.expectFrames(frames, 4, command: "CANCEL")
            return .cancel(tag: try WireFormat.deliveryTag(frames[2]), try RequestID(frame: frames[3]))
        case .drainingAcknowledged:
            try WireFormat.expectFrames(frames, 2, command: "DRAINING")
            return .drainingAcknowledged
        case .refused:
            try WireFormat.expectFrames(frames, 3, command: "REFUSED")
            return .refused(reason: String(decoding: frames[2], as: UTF8.self))
        case .features:
            return .features(try WireFormat.featureNames(frames))
        }
    }

    public func encode() -> [[UInt8]] {
        switch self {
        case .request, .packedRequest: frames().arrays
        default: otherFrames()
        }
    }

    /// The message in one buffer, after the routing-id frame `routingID`.
    public func frames(routedTo routingID: [UInt8]) -> Frames {
        routingID.withUnsafeBytes { frames(routedTo: $0) }
    }

    /// The message in one buffer, after a ROUTER's routing-id frame when one is given: a
    /// REQUEST, once per task, is written there directly. The id is borrowed, so that a router
    /// that keeps it inline need not make an array of it for every message.
    public func frames(routedTo routingID: UnsafeRawBufferPointer? = nil) -> Frames {
        if case .packedRequest(let tag, let request) = self {
            return Self.packed(tag: tag, request, routedTo: routingID)
        }
        guard case .request(let tag, let request) = self else {
            return Frames((routingID.map { [Array($0)] } ?? []) + otherFrames())
        }
        let prefix = routingID == nil ? 0 : 1
        let trace = request.trace
        var writer = Frames.Writer(
            frames: prefix + (trace == nil ? 7 : 8),
            bytes: (routingID?.count ?? 0) + WireFormat.workerSignature.count + 1 + tag.count + RequestID.byteCount
                + request.service.utf8.count + RequestHeader.byteCount + Frames.inlineSize(request.body.count)
                + Frames.inlineSize(trace?.count ?? 0))
        if let routingID { writer.append(routingID) }
        writer.append(WireFormat.workerSignature)
        writer.append(byte: Command.request.rawValue)
        tag.withBytes { writer.append($0) }
        writer.append(request.requestID)
        writer.append(utf8: request.service)
        // Workers get the 8-byte header: the no-workers grace and the priority concern the broker alone.
        writer.append(bigEndian: request.header.attempt, request.header.timeoutMilliseconds)
        writer.append(request.body)
        if let trace { writer.append(trace) }
        return writer.finish()
    }

    private static func packed(tag: DeliveryTag, _ request: TaskRequest, routedTo routingID: UnsafeRawBufferPointer?)
        -> Frames
    {
        let signature = WireFormat.packedWorkerSignature
        let trace = request.trace
        var writer = Frames.Writer(
            frames: (routingID == nil ? 0 : 1) + (trace == nil ? 2 : 3),
            bytes: (routingID?.count ?? 0) + signature.count + 1 + RequestID.byteCount
                + packedFieldBytes(tag: tag, request) + Frames.inlineSize(request.body.count)
                + Frames.inlineSize(trace?.count ?? 0))
        if let routingID { writer.append(routingID) }
        writer.appendPacked(
            signature, command: Command.request.rawValue, request.requestID,
            fieldBytes: packedFieldBytes(tag: tag, request)
        ) { writePackedFields(&$0, tag: tag, request) }
        writer.append(request.body)
        if let trace { writer.append(trace) }
        return writer.finish()
    }

    /// Lends a packed REQUEST to `use` as ``FrameParts``, after a ROUTER's routing-id frame when
    /// one is given, sent with no buffer of its own; false, and `use` not called, for any other
    /// command (then ``frames(routedTo:)``).
    public func lendParts(
        routedTo routingID: UnsafeRawBufferPointer?, _ use: (FrameParts) -> Void
    ) -> Bool {
        guard case .packedRequest(let tag, let request) = self else { return false }
        Self.lendPackedRequest(tag: tag, request, routedTo: routingID, use)
        return true
    }

    /// ``lendParts(routedTo:_:)`` of `.packedRequest(tag:request)`, for a sender that holds the
    /// request itself: taking it out of the enum copied it (its references counted up and down,
    /// through the runtime's generic tuple witness).
    public static func lendPackedRequest(
        tag: DeliveryTag, _ request: TaskRequest, routedTo routingID: UnsafeRawBufferPointer?,
        _ use: (FrameParts) -> Void
    ) {
        // The closure takes the fields it writes, not the request: capturing it copied it.
        let (header, service) = (request.header, request.service)
        FrameParts.lendPacked(
            WireFormat.packedWorkerSignature, command: Command.request.rawValue, request.requestID,
            fieldBytes: packedFieldBytes(tag: tag, request), routedTo: routingID, body: request.body[...],
            trailer: request.trace, fields: { writePackedFields(&$0, tag: tag, header, service) }, to: use)
    }

    /// The bytes of a packed REQUEST's fields after its request id.
    private static func packedFieldBytes(tag: DeliveryTag, _ request: TaskRequest) -> Int {
        9 + tag.count + request.service.utf8.count
    }

    private static func writePackedFields(_ fields: inout PackedFieldWriter, tag: DeliveryTag, _ request: TaskRequest) {
        writePackedFields(&fields, tag: tag, request.header, request.service)
    }

    private static func writePackedFields(
        _ fields: inout PackedFieldWriter, tag: DeliveryTag, _ header: RequestHeader, _ service: String
    ) {
        // As in the framed form, workers get attempt and timeout only.
        fields.bigEndian(header.attempt)
        fields.bigEndian(header.timeoutMilliseconds)
        fields.byte(UInt8(clamping: tag.count))
        tag.withBytes { fields.bytes($0) }
        fields.utf8(service)
    }

    private func otherFrames() -> [[UInt8]] {
        let signature = WireFormat.workerSignature
        switch self {
        case .cancel(let tag, let requestID):
            return [signature, [Command.cancel.rawValue], tag.bytes.array, requestID.frame]
        case .refused(let reason):
            return [signature, [Command.refused.rawValue], Array(reason.utf8)]
        case .features(let lines):
            return [signature, [Command.features.rawValue]] + lines.map { Array($0.utf8) }
        case .drainingAcknowledged:
            return [signature, [Command.drainingAcknowledged.rawValue]]
        case .request, .packedRequest:
            preconditionFailure("frames(routedTo:) builds a REQUEST")
        case .heartbeat:
            return [signature, [Command.heartbeat.rawValue]]
        case .disconnect:
            return [signature, [Command.disconnect.rawValue]]
        }
    }
}
