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
    /// Every length of a header without a concurrency key.
    static let unkeyedByteCounts = [byteCount, extendedByteCount, prioritizedByteCount, flaggedByteCount]
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
        guard Self.unkeyedByteCounts.contains(frame.count) else {
            throw .invalidFieldLength(
                name: "request header", allowedLengths: Self.unkeyedByteCounts, actual: frame.count)
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

    /// The shortest header with a concurrency key: the 20-byte header, the limit (u32), the
    /// key's length (u8) and a key of one byte.
    public static let keyedByteCount = flaggedByteCount + 6
    /// The largest concurrency limit.
    public static let maxConcurrencyLimit: UInt32 = 1_000_000

    /// The header frame of a request with a concurrency key: every field of the 20-byte header,
    /// then the limit, the key's length and the key (cut to 255 bytes; callers check names
    /// first).
    public func keyedFrame(key: String, limit: UInt32) -> [UInt8] {
        let keyBytes = key.utf8.prefix(WireFormat.maxNameLength)
        var frame: [UInt8] = []
        frame.reserveCapacity(Self.flaggedByteCount + 5 + keyBytes.count)
        WireFormat.append(attempt, to: &frame)
        WireFormat.append(timeoutMilliseconds, to: &frame)
        WireFormat.append(noWorkersGraceMilliseconds, to: &frame)
        WireFormat.append(UInt32(bitPattern: Int32(priority)), to: &frame)
        WireFormat.append(keepIfAbandoned ? Self.keepFlag : 0, to: &frame)
        WireFormat.append(limit, to: &frame)
        frame.append(UInt8(keyBytes.count))
        frame += keyBytes
        return frame
    }

    /// A client's REQUEST header of a length no form has: its message names every form, the
    /// keyed one too (a 9-byte header's line once listed only 8, 12, 16 or 20).
    static func clientHeaderLength(_ count: Int) -> ProtocolError {
        .invalidValue(
            name: "request header",
            reason:
                "\(count) bytes; 8, 12, 16 or 20, or with a concurrency key \(keyedByteCount) to \(flaggedByteCount + 5 + WireFormat.maxNameLength)"
        )
    }

    /// Reads what follows the 20-byte fields of a header with a concurrency key: the limit
    /// (u32, at most ``maxConcurrencyLimit``), the key's length (1–255) and the key (a name).
    static func concurrency(_ rest: ArraySlice<UInt8>) throws(ProtocolError) -> (key: String, limit: UInt32) {
        guard rest.count >= 6 else { throw clientHeaderLength(rest.count + flaggedByteCount) }
        let start = rest.startIndex
        let limit = try WireFormat.uint32(rest[start..<start + 4], name: "concurrency limit")
        guard limit <= maxConcurrencyLimit else {
            throw .invalidValue(name: "concurrency limit", reason: "\(limit); at most \(maxConcurrencyLimit)")
        }
        let length = Int(rest[start + 4])
        guard rest.count == 5 + length else {
            throw .invalidValue(
                name: "concurrency key", reason: "its length says \(length) bytes, the header holds \(rest.count - 5)")
        }
        do {
            return (try WireFormat.name(rest[(start + 5)...]), limit)
        } catch {
            throw .invalidValue(
                name: "concurrency key", reason: "not 1–255 bytes of UTF-8 without control characters")
        }
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
    /// Body, trace frame and concurrency key in one word: the broker keeps a copy of every
    /// waiting request, and an optional field of its own would cost each of them its bytes (and
    /// each copy its reference counting), whether it is set or not. Readable by inlined code:
    /// a getter called across modules made the broker copy the whole request to call it.
    @usableFromInline var payload: Payload

    public var body: [UInt8] {
        @inlinable get {
            switch payload {
            case .plain(let body): body
            case .extended(let extended): extended.body
            }
        }
        set { payload = Payload(body: newValue, trace: trace, key: concurrencyKey, limit: concurrencyLimit) }
    }

    /// The optional trace frame (a ``TraceContext``), at most ``TraceContext/maxBytes``;
    /// carried as it came, never read by the broker.
    public var trace: [UInt8]? {
        @inlinable get { extended?.trace }
        set { payload = Payload(body: body, trace: newValue, key: concurrencyKey, limit: concurrencyLimit) }
    }

    /// The key (a customer, a tenant) whose calls share ``concurrencyLimit`` and take turns with
    /// other keys' calls of the service while they wait: a name (1–255 bytes of UTF-8, no
    /// control characters), or `nil`. Travels only from client to broker, in a REQUEST header of
    /// 26 bytes or more, to a broker that names ``BrokerFeatures/concurrencyKeysFeature``.
    public var concurrencyKey: String? {
        @inlinable get { extended?.key }
        set { payload = Payload(body: body, trace: trace, key: newValue, limit: concurrencyLimit) }
    }

    /// At most this many calls of ``concurrencyKey`` run at once; 0 for no limit.
    public var concurrencyLimit: UInt32 {
        @inlinable get { extended?.limit ?? 0 }
        set { payload = Payload(body: body, trace: trace, key: concurrencyKey, limit: newValue) }
    }

    @inlinable var extended: Extended? {
        switch payload {
        case .plain: nil
        case .extended(let extended): extended
        }
    }

    public init(
        requestID: RequestID, service: String, header: RequestHeader = RequestHeader(), body: [UInt8],
        trace: [UInt8]? = nil
    ) {
        self.requestID = requestID
        self.service = service
        self.header = header
        payload = Payload(body: body, trace: trace, key: nil, limit: 0)
    }

    /// A request with its concurrency key and limit, boxed with its body once (each setter
    /// makes a new box: two allocations a keyed request when the broker decoded it so).
    package init(
        requestID: RequestID, service: String, header: RequestHeader, body: [UInt8], trace: [UInt8]?,
        concurrencyKey: String?, concurrencyLimit: UInt32
    ) {
        self.requestID = requestID
        self.service = service
        self.header = header
        payload = Payload(body: body, trace: trace, key: concurrencyKey, limit: concurrencyLimit)
    }

    /// The bytes it holds beyond its fixed fields, which bound a queue: body, trace frame and
    /// concurrency key. Inlinable: called across modules, it made the broker copy the queue
    /// entry that holds the request (every reference counted up and down) to call it.
    @inlinable @inline(__always) public var queuedSize: Int {
        switch payload {
        case .plain(let body): body.count
        case .extended(let extended):
            extended.body.count + (extended.trace?.count ?? 0) + (extended.key?.utf8.count ?? 0)
        }
    }

    @usableFromInline enum Payload: Sendable, Equatable {
        case plain([UInt8])
        case extended(Extended)

        init(body: [UInt8], trace: [UInt8]?, key: String?, limit: UInt32) {
            if trace == nil && key == nil && limit == 0 {
                self = .plain(body)
            } else {
                self = .extended(Extended(body: body, trace: trace, key: key, limit: limit))
            }
        }
    }

    /// A request's frames beyond the body (a trace frame, a concurrency key), boxed with the
    /// body (immutable: a change makes a new box).
    @usableFromInline final class Extended: Sendable, Equatable {
        @usableFromInline let body: [UInt8]
        @usableFromInline let trace: [UInt8]?
        @usableFromInline let key: String?
        @usableFromInline let limit: UInt32

        init(body: [UInt8], trace: [UInt8]?, key: String?, limit: UInt32) {
            self.body = body
            self.trace = trace
            self.key = key
            self.limit = limit
        }

        @usableFromInline static func == (lhs: Extended, rhs: Extended) -> Bool {
            lhs.body == rhs.body && lhs.trace == rhs.trace && lhs.key == rhs.key && lhs.limit == rhs.limit
        }
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
    /// The array that holds the body, and the body's place in it: an array of its own (the
    /// whole range), or a received message's buffer, shared. The broker, which forwards a
    /// worker's reply at once, writes its body into the client's message without first copying
    /// it out into an array of its own (an allocation, a copy and a release a task); and a
    /// client hands the body to its caller as the array it is, where an `ArraySlice` would be
    /// cast at run time twice to find its array.
    @usableFromInline var bodyStorage: [UInt8]
    @usableFromInline var bodyRange: Range<Int>

    /// The body as a view (of a received message's buffer, for a reply decoded from one).
    @inlinable public var bodyBytes: ArraySlice<UInt8> {
        get { bodyStorage[bodyRange] }
        set {
            bodyStorage = Array(newValue)
            bodyRange = 0..<bodyStorage.count
        }
    }

    /// The encoded result when ``status`` is ``ReplyStatus/ok``, otherwise a ``RemoteErrorBody`` as JSON.
    /// The array the reply was made with, not a copy of it; a copy when the reply was decoded
    /// from a view of a larger buffer (see ``bodyBytes``).
    @inlinable public var body: [UInt8] {
        get { bodyRange == 0..<bodyStorage.count ? bodyStorage : Array(bodyStorage[bodyRange]) }
        set {
            bodyStorage = newValue
            bodyRange = 0..<newValue.count
        }
    }

    public init(requestID: RequestID, attempt: UInt32 = 1, status: ReplyStatus, body: [UInt8]) {
        self.init(requestID: requestID, attempt: attempt, status: status, bodyIn: body, range: 0..<body.count)
    }

    /// A reply whose body is a view: copied into an array of its own unless it spans the whole
    /// of one (decoders share a received buffer through ``init(requestID:attempt:status:bodyIn:range:)``).
    public init(requestID: RequestID, attempt: UInt32 = 1, status: ReplyStatus, bodyBytes: ArraySlice<UInt8>) {
        let body = Array(bodyBytes)
        self.init(requestID: requestID, attempt: attempt, status: status, bodyIn: body, range: 0..<body.count)
    }

    /// A reply whose body is `range` of `array` (a received message's buffer, shared).
    public init(
        requestID: RequestID, attempt: UInt32 = 1, status: ReplyStatus, bodyIn array: [UInt8], range: Range<Int>
    ) {
        precondition(range.lowerBound >= 0 && range.upperBound <= array.count, "a body within its array")
        self.requestID = requestID
        self.attempt = attempt
        self.status = status
        bodyStorage = array
        bodyRange = range
    }

    public static func == (lhs: TaskReply, rhs: TaskReply) -> Bool {
        lhs.requestID == rhs.requestID && lhs.attempt == rhs.attempt && lhs.status == rhs.status
            && lhs.bodyBytes == rhs.bodyBytes
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
