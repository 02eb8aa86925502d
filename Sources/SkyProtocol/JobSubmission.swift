/// What a client asks the broker to keep and run: the body of an `mmi.jobs.submit` request.
///
/// Layout (integers big-endian), version 1:
/// `[version=1][service-len u8][service][priority i8][not-before-ms u64][delay-ms u64]`
/// `[retention-ms u64][timeout-ms u32][max-attempts u16][initial-backoff-ms u32]`
/// `[max-backoff-ms u32][multiplier×100 u16][retry-count u8][retry statuses u8…]`
/// `[key-len u8][idempotency key][task body…]` — the task body is the rest of the frame.
/// Version 2 is version 1 with `[confirm-within-ms u32]` after the version byte; it is sent
/// only to a broker that names `job-submission=2` in `mmi.features`
/// (``BrokerFeatures/jobSubmissionVersion``). Version 3 is version 2 with `[key-hold u8]`
/// after the confirmation bound (``KeyHold``), sent only to a broker that names
/// `job-submission=3`. Version 4 is version 3 with `[concurrency-limit u32][concurrency-key-len
/// u8][concurrency key]` after the key hold (``concurrencyKey``), sent only to a broker that
/// names `job-submission=4`.
/// Binary rather than JSON: the broker decodes one per job on its I/O thread.
public struct JobSubmission: Sendable, Equatable {
    public var service: String
    /// Higher runs first among waiting jobs of a service (-128…127; 0 by default).
    public var priority: Int8 = 0
    /// Not started before this wall-clock time (milliseconds since 1970); 0 for no such bound.
    public var notBeforeMilliseconds: Int64 = 0
    /// Not started before this long after the broker recorded it.
    public var delayMilliseconds: UInt64 = 0
    /// How long the outcome is kept after the job ended.
    public var retentionMilliseconds: UInt64 = 86_400_000
    /// How long one attempt may run; 0 for no limit.
    public var timeoutMilliseconds: UInt32 = 0
    /// Attempts in all, the first included (at least 1).
    public var maxAttempts: UInt16 = 3
    public var initialBackoffMilliseconds: UInt32 = 100
    public var maxBackoffMilliseconds: UInt32 = 5000
    /// Growth of the backoff per attempt, in hundredths (200 doubles it).
    public var multiplierPercent: UInt16 = 200
    /// Failure statuses after which another attempt is made.
    public var retryOn: [ReplyStatus] = [.deadlineExceeded]
    /// A second submit with the same key, while the first job is kept, returns the first job.
    public var idempotencyKey: String?
    /// The encoded task, exactly as `scan` would send it.
    public var body: [UInt8]
    /// How long the submitter waits for the journal to confirm the job before the broker
    /// answers `journalUnconfirmed` (the job may still be recorded); 0: as long as the journal
    /// takes to record it or fail. Not a property of the job: never recorded with it. A value
    /// other than 0 makes the wire form version 2.
    public var confirmWithinMilliseconds: UInt32 = 0
    /// How long the idempotency key holds: while the job is kept (an idempotency key), or
    /// only while it waits or runs (a unique job's key, which the next job may take once the
    /// job started or ended). Anything but ``KeyHold/kept`` makes the wire form version 3.
    public var keyHold: KeyHold = .kept
    /// The key whose jobs share ``concurrencyLimit`` and take turns with other keys' jobs of
    /// the service (a customer, a tenant): one key's backlog delays another key's job by at
    /// most one turn per key. A name (1–255 bytes of UTF-8, no control characters); `nil` for
    /// none: such jobs take their turns as one key of their own. Anything but `nil` makes the
    /// wire form version 4.
    public var concurrencyKey: String?
    /// At most this many jobs of ``concurrencyKey`` run at once (counted from their start until
    /// the broker has the attempt's answer); 0 for no limit. Each job is held to its own limit:
    /// it starts only while fewer jobs of its key than its limit run.
    public var concurrencyLimit: UInt32 = 0
    /// The largest ``concurrencyLimit``.
    public static let maxConcurrencyLimit = RequestHeader.maxConcurrencyLimit

    /// How long a job's idempotency key keeps a second submit with it from making a job.
    public enum KeyHold: UInt8, Sendable, Equatable, CaseIterable {
        /// While the job is kept, its retention after it ended included.
        case kept = 0
        /// Until the job is first sent to a worker: at most one job of the key waits.
        case whileQueued = 1
        /// Until the job ended: at most one job of the key waits or runs.
        case whileRunning = 2
        /// For ``JobSubmission/keyHoldMilliseconds`` after the job was submitted, whatever it
        /// became meanwhile: at most one job of the key is submitted in that time.
        case forTime = 3
    }

    /// With ``KeyHold/forTime``: how long the key holds after the submit, in milliseconds
    /// (``keyHoldRange``); 0 otherwise.
    public var keyHoldMilliseconds: UInt64 = 0
    /// The hold ``KeyHold/forTime`` takes: a second to 366 days.
    public static let keyHoldRange: ClosedRange<UInt64> = 1000...31_622_400_000

    /// The version written when the submission asks for neither a confirmation bound nor a key
    /// hold, and the one the broker records a job's options in.
    public static let version: UInt8 = 1
    /// The version that carries ``confirmWithinMilliseconds``.
    public static let confirmingVersion: UInt8 = 2
    /// The version that carries ``keyHold``.
    public static let keyHoldVersion: UInt8 = 3
    /// The version that carries ``concurrencyKey``, and the newest a broker reads.
    public static let newestVersion: UInt8 = 4
    /// Longest idempotency key, in bytes.
    public static let maxKeyLength = 255
    /// What the broker records a unique job's key behind, by its hold (``recordedPrefix(of:)``).
    /// A client's key may not start with it.
    public static let uniqueKeyPrefix = "sky.unique/"
    /// Longest key of a unique job: the broker records it behind its hold's prefix, within
    /// ``maxKeyLength``.
    public static let maxUniqueKeyLength = maxKeyLength - recordedPrefix(of: .whileQueued).utf8.count

    /// The prefix a key of `hold` is recorded behind: none for a plain idempotency key,
    /// `sky.unique/q/` for one held while queued, `sky.unique/r/` while running, `sky.unique/t/`
    /// for a time, so that they never meet, and a broker that reads the job back knows how long its key holds.
    public static func recordedPrefix(of hold: KeyHold) -> String {
        switch hold {
        case .kept: ""
        case .whileQueued: uniqueKeyPrefix + "q/"
        case .whileRunning: uniqueKeyPrefix + "r/"
        case .forTime: uniqueKeyPrefix + "t/"
        }
    }

    /// The key the broker records (``recordedPrefix(of:)``).
    public var recordedKey: String? {
        idempotencyKey.map { Self.recordedPrefix(of: keyHold) + $0 }
    }

    public init(service: String, body: [UInt8]) {
        self.service = service
        self.body = body
    }

    /// The wire form. Fields longer than the format holds are cut to it (255 bytes of service
    /// name and key, 255 statuses); callers check names first (`WireFormat.isValidName`).
    public func encode() -> [UInt8] {
        let name = Array(service.utf8.prefix(255))
        var bytes: [UInt8] = []
        bytes.reserveCapacity(68 + name.count + body.count)
        if keyHold != .kept || concurrencyKey != nil {
            bytes.append(concurrencyKey != nil ? Self.newestVersion : Self.keyHoldVersion)
            WireFormat.append(confirmWithinMilliseconds, to: &bytes)
            bytes.append(keyHold.rawValue)
            if keyHold == .forTime { WireFormat.append(keyHoldMilliseconds, to: &bytes) }
            if let concurrencyKey {
                let key = concurrencyKey.utf8.prefix(WireFormat.maxNameLength)
                WireFormat.append(concurrencyLimit, to: &bytes)
                bytes.append(UInt8(key.count))
                bytes += key
            }
        } else if confirmWithinMilliseconds != 0 {
            bytes.append(Self.confirmingVersion)
            WireFormat.append(confirmWithinMilliseconds, to: &bytes)
        } else {
            bytes.append(Self.version)
        }
        bytes.append(UInt8(name.count))
        bytes += name
        bytes.append(UInt8(bitPattern: priority))
        WireFormat.append(notBeforeMilliseconds, to: &bytes)
        WireFormat.append(delayMilliseconds, to: &bytes)
        WireFormat.append(retentionMilliseconds, to: &bytes)
        WireFormat.append(timeoutMilliseconds, to: &bytes)
        WireFormat.append(maxAttempts, to: &bytes)
        WireFormat.append(initialBackoffMilliseconds, to: &bytes)
        WireFormat.append(maxBackoffMilliseconds, to: &bytes)
        WireFormat.append(multiplierPercent, to: &bytes)
        let statuses = retryOn.prefix(255)
        bytes.append(UInt8(statuses.count))
        for status in statuses { bytes.append(status.rawValue) }
        let key = (idempotencyKey ?? "").utf8.prefix(Self.maxKeyLength)
        bytes.append(UInt8(key.count))
        bytes += key
        bytes += body
        return bytes
    }

    /// Decodes a submission; every field is checked, nothing traps.
    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let version = try reader.byte("version")
        guard (Self.version...Self.newestVersion).contains(version) else {
            throw .invalidValue(
                name: "job version", reason: "\(version); this broker reads \(Self.version) to \(Self.newestVersion)")
        }
        if version >= Self.confirmingVersion { confirmWithinMilliseconds = try reader.uint32("confirm-within") }
        if version >= Self.keyHoldVersion {
            let hold = try reader.byte("key hold")
            guard let known = KeyHold(rawValue: hold) else {
                throw .invalidValue(
                    name: "key hold", reason: "\(hold); 0 kept, 1 while queued, 2 while running, 3 for a time")
            }
            keyHold = known
            if known == .forTime {
                keyHoldMilliseconds = try reader.uint64("key hold time")
                guard Self.keyHoldRange.contains(keyHoldMilliseconds) else {
                    throw .invalidValue(
                        name: "key hold time",
                        reason: "\(keyHoldMilliseconds) ms; \(Self.keyHoldRange.lowerBound) ms to 366 days")
                }
            }
        }
        if version >= Self.newestVersion {
            concurrencyLimit = try reader.uint32("concurrency limit")
            guard concurrencyLimit <= Self.maxConcurrencyLimit else {
                throw .invalidValue(
                    name: "concurrency limit", reason: "\(concurrencyLimit); at most \(Self.maxConcurrencyLimit)")
            }
            let key = try reader.take(Int(try reader.byte("concurrency key length")), "concurrency key")
            if key.isEmpty {
                guard concurrencyLimit == 0 else {
                    throw .invalidValue(
                        name: "concurrency limit",
                        reason: "\(concurrencyLimit) without a concurrency key; a limit needs one")
                }
            } else {
                do {
                    concurrencyKey = try WireFormat.name(key)
                } catch {
                    throw .invalidValue(
                        name: "concurrency key", reason: "not 1–255 bytes of UTF-8 without control characters")
                }
            }
        }
        service = try WireFormat.name(try reader.take(Int(try reader.byte("service length")), "service"))
        priority = Int8(bitPattern: try reader.byte("priority"))
        notBeforeMilliseconds = Int64(bitPattern: try reader.uint64("not-before"))
        delayMilliseconds = try reader.uint64("delay")
        retentionMilliseconds = try reader.uint64("retention")
        timeoutMilliseconds = try reader.uint32("timeout")
        maxAttempts = try reader.uint16("max attempts")
        guard maxAttempts >= 1 else { throw .invalidValue(name: "max attempts", reason: "0; at least 1") }
        initialBackoffMilliseconds = try reader.uint32("initial backoff")
        maxBackoffMilliseconds = try reader.uint32("max backoff")
        multiplierPercent = try reader.uint16("multiplier")
        guard multiplierPercent >= 100 else {
            throw .invalidValue(name: "multiplier", reason: "\(multiplierPercent)%; at least 100")
        }
        var statuses: [ReplyStatus] = []
        for raw in try reader.take(Int(try reader.byte("retry count")), "retry statuses") {
            guard let status = ReplyStatus(rawValue: raw) else {
                throw .invalidValue(name: "retry status", reason: "unknown status \(raw)")
            }
            statuses.append(status)
        }
        retryOn = statuses
        let key = try reader.take(Int(try reader.byte("key length")), "idempotency key")
        if key.isEmpty {
            idempotencyKey = nil
        } else {
            guard let text = String(validating: key, as: UTF8.self) else {
                throw .invalidValue(name: "idempotency key", reason: "not UTF-8")
            }
            idempotencyKey = text
        }
        if keyHold != .kept {
            guard let key = idempotencyKey else {
                throw .invalidValue(
                    name: "key hold", reason: "\(keyHold) without an idempotency key; a unique job needs one")
            }
            guard key.utf8.count <= Self.maxUniqueKeyLength else {
                throw .invalidValue(
                    name: "idempotency key",
                    reason: "\(key.utf8.count) bytes; a unique job's is \(Self.maxUniqueKeyLength) at most")
            }
        }
        body = reader.rest()
    }
}

/// Reads fields front to back, throwing instead of trapping when the bytes run out.
struct ByteReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Bytes not read yet.
    var remaining: Int { bytes.count - offset }

    mutating func take(_ count: Int, _ name: String) throws(ProtocolError) -> [UInt8] {
        guard count >= 0, bytes.count - offset >= count else {
            throw .invalidValue(
                name: name, reason: "\(bytes.count - offset) bytes are left of the message, \(count) needed")
        }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func byte(_ name: String) throws(ProtocolError) -> UInt8 { try take(1, name)[0] }

    mutating func uint16(_ name: String) throws(ProtocolError) -> UInt16 {
        let two = try take(2, name)
        return UInt16(two[0]) << 8 | UInt16(two[1])
    }

    mutating func uint32(_ name: String) throws(ProtocolError) -> UInt32 {
        try WireFormat.uint32(try take(4, name), name: name)
    }

    mutating func uint64(_ name: String) throws(ProtocolError) -> UInt64 {
        try WireFormat.uint64(try take(8, name), name: name)
    }

    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }
}
