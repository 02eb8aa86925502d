/// Per-attempt facts a request carries besides its payload.
public struct RequestHeader: Sendable, Equatable {
    /// 1 for the first delivery of a call; raised by each retry.
    public var attempt: UInt32
    /// How long the caller will wait for this attempt, in milliseconds; 0 means no deadline.
    /// Relative, not absolute, so client and broker clocks need not agree.
    public var timeoutMilliseconds: UInt32
    /// How long the broker may hold the request while no connected worker serves its service,
    /// before it answers `noWorkers`; 0 takes the broker's default (`--no-workers-grace`).
    /// Travels only from client to broker (the optional third field of a 12- or 16-byte header).
    public var noWorkersGraceMilliseconds: UInt32
    /// Among the waiting requests of a service, higher first (the same scale as a job's
    /// priority; 0 is normal). Travels only from client to broker (the fourth field of a
    /// 16-byte header, a signed 32-bit number, clamped to -128...127).
    public var priority: Int8
    /// If its caller goes away (a CANCEL, or its deadline passes, or its reply finds no client),
    /// the broker records the call as a durable job whose id is the request id, instead of
    /// dropping it. Travels only from client to broker (bit 0 of the fifth field, `flags`, of a
    /// 20-byte header), to a broker that names ``BrokerFeatures/keepIfAbandonedFeature``.
    public var keepIfAbandoned: Bool

    /// The header's size: attempt and timeout; with the no-workers grace; with the priority
    /// too; with the flags too.
    public static let byteCount = 8
    public static let extendedByteCount = 12
    public static let prioritizedByteCount = 16
    public static let flaggedByteCount = 20
    /// The flag that says ``keepIfAbandoned``; the other bits are sent 0 and ignored.
    static let keepFlag: UInt32 = 1

    public init(
        attempt: UInt32 = 1, timeoutMilliseconds: UInt32 = 0, noWorkersGraceMilliseconds: UInt32 = 0,
        priority: Int8 = 0, keepIfAbandoned: Bool = false
    ) {
        self.attempt = attempt
        self.timeoutMilliseconds = timeoutMilliseconds
        self.noWorkersGraceMilliseconds = noWorkersGraceMilliseconds
        self.priority = priority
        self.keepIfAbandoned = keepIfAbandoned
    }

    init(frame: ArraySlice<UInt8>) throws(ProtocolError) {
        let lengths = [Self.byteCount, Self.extendedByteCount, Self.prioritizedByteCount, Self.flaggedByteCount]
        guard lengths.contains(frame.count) else {
            throw .invalidFieldLength(name: "request header", allowedLengths: lengths, actual: frame.count)
        }
        let start = frame.startIndex
        attempt = try WireFormat.uint32(frame[start..<start + 4], name: "attempt")
        timeoutMilliseconds = try WireFormat.uint32(frame[start + 4..<start + 8], name: "timeout")
        noWorkersGraceMilliseconds =
            frame.count >= Self.extendedByteCount
            ? try WireFormat.uint32(frame[start + 8..<start + 12], name: "grace") : 0
        priority =
            frame.count >= Self.prioritizedByteCount
            ? Int8(clamping: Int32(bitPattern: try WireFormat.uint32(frame[start + 12..<start + 16], name: "priority")))
            : 0
        let flags =
            frame.count == Self.flaggedByteCount
            ? try WireFormat.uint32(frame[start + 16..<start + 20], name: "flags") : 0
        keepIfAbandoned = flags & Self.keepFlag != 0
    }

    /// The fields a client sends after attempt and timeout: as few as say something, so that
    /// an older broker reads every request that asks for nothing new.
    public var optionalFields: (grace: UInt32?, priority: UInt32?, flags: UInt32?) {
        let priorityField = UInt32(bitPattern: Int32(priority))
        if keepIfAbandoned { return (noWorkersGraceMilliseconds, priorityField, Self.keepFlag) }
        if priority != 0 { return (noWorkersGraceMilliseconds, priorityField, nil) }
        return (noWorkersGraceMilliseconds == 0 ? nil : noWorkersGraceMilliseconds, nil, nil)
    }
}

/// One task to run: what a client asks for and what a worker is handed.
///
/// The broker never looks inside ``body``: it is the task encoded by the client (JSON for the
/// typed API) and travels by reference from the client's frame to the worker's.
public struct TaskRequest: Sendable, Equatable {
    public var requestID: RequestID
    public var service: String
    public var header: RequestHeader
    /// Body and trace frame in one word: the broker keeps a copy of every waiting request, and
    /// an optional frame of its own would cost each of them 8 bytes, traced or not.
    private var payload: Payload

    public var body: [UInt8] {
        get {
            switch payload {
            case .plain(let body): body
            case .traced(let traced): traced.body
            }
        }
        set { payload = Payload(body: newValue, trace: trace) }
    }

    /// The optional trace frame (a ``TraceContext``), at most ``TraceContext/maxBytes``;
    /// carried as it came, never read by the broker.
    public var trace: [UInt8]? {
        get {
            switch payload {
            case .plain: nil
            case .traced(let traced): traced.trace
            }
        }
        set { payload = Payload(body: body, trace: newValue) }
    }

    public init(
        requestID: RequestID, service: String, header: RequestHeader = RequestHeader(), body: [UInt8],
        trace: [UInt8]? = nil
    ) {
        self.requestID = requestID
        self.service = service
        self.header = header
        payload = Payload(body: body, trace: trace)
    }

    /// The bytes it holds beyond its fixed fields, which bound a queue: body and trace frame.
    public var queuedSize: Int {
        switch payload {
        case .plain(let body): body.count
        case .traced(let traced): traced.body.count + traced.trace.count
        }
    }

    private enum Payload: Sendable, Equatable {
        case plain([UInt8])
        case traced(Traced)

        init(body: [UInt8], trace: [UInt8]?) {
            self = trace.map { .traced(Traced(body: body, trace: $0)) } ?? .plain(body)
        }
    }

    /// A traced request's two frames, boxed (immutable: a change makes a new box).
    private final class Traced: Sendable, Equatable {
        let body: [UInt8]
        let trace: [UInt8]

        init(body: [UInt8], trace: [UInt8]) {
            self.body = body
            self.trace = trace
        }

        static func == (lhs: Traced, rhs: Traced) -> Bool { lhs.body == rhs.body && lhs.trace == rhs.trace }
    }
}

/// The outcome of one task: a status and, for success, the result; otherwise an error body.
public struct TaskReply: Sendable, Equatable {
    public var requestID: RequestID
    /// Which attempt of the call this answers (the request's ``RequestHeader/attempt``), so a
    /// client that retried can tell a late answer to an earlier attempt from the current one.
    /// Carried on the client protocol only; the broker fills it in from the request it holds.
    public var attempt: UInt32
    public var status: ReplyStatus
    /// The body as a view. A reply decoded from a received message shares that message's
    /// buffer, so the broker, which forwards a worker's reply at once, writes its body into the
    /// client's message without first copying it out into an array of its own (an allocation,
    /// a copy and a release a task).
    public var bodyBytes: ArraySlice<UInt8>

    /// The encoded result when ``status`` is ``ReplyStatus/ok``, otherwise a ``RemoteErrorBody`` as JSON.
    /// The array the reply was made with, not a copy of it; a copy when the reply was decoded
    /// from a view of a larger buffer (see ``bodyBytes``).
    public var body: [UInt8] {
        get { Array(bodyBytes) }
        set { bodyBytes = newValue[...] }
    }

    public init(requestID: RequestID, attempt: UInt32 = 1, status: ReplyStatus, body: [UInt8]) {
        self.init(requestID: requestID, attempt: attempt, status: status, bodyBytes: body[...])
    }

    public init(requestID: RequestID, attempt: UInt32 = 1, status: ReplyStatus, bodyBytes: ArraySlice<UInt8>) {
        self.requestID = requestID
        self.attempt = attempt
        self.status = status
        self.bodyBytes = bodyBytes
    }

    /// A failure reply whose body explains it.
    /// - Parameter type: the error's type name; by default the status's own name (`cancelled`,
    ///   `overloaded`), so that every role names a failure of Sky's own the same way.
    public static func failure(
        _ requestID: RequestID, _ status: ReplyStatus, type: String? = nil, message: String, attempt: UInt32 = 1
    ) -> TaskReply {
        TaskReply(
            requestID: requestID, attempt: attempt, status: status,
            body: RemoteErrorBody(type: type ?? status.description, message: message).encoded())
    }
}
