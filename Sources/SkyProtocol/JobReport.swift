/// Where a durable job stands.
public enum JobState: UInt8, Sendable, CaseIterable, CustomStringConvertible {
    case queued = 0
    case running = 1
    case succeeded = 2
    case failed = 3
    case cancelled = 4
    /// Queued with a start time still ahead.
    case scheduled = 5
    /// The broker knows no such job: never submitted there, or expired after its retention.
    case unknown = 255

    /// Whether the job ended (its outcome is recorded and will not change).
    public var isFinished: Bool { self == .succeeded || self == .failed || self == .cancelled }

    public var description: String {
        switch self {
        case .queued: "queued"
        case .running: "running"
        case .succeeded: "succeeded"
        case .failed: "failed"
        case .cancelled: "cancelled"
        case .scheduled: "scheduled"
        case .unknown: "unknown"
        }
    }

    /// Parses the name `description` gives (for command-line filters).
    public init?(name: String) {
        guard let state = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = state
    }
}

/// The broker's answer about one job, to `mmi.jobs.status`, `mmi.jobs.wait` and `mmi.jobs.cancel`.
///
/// Layout (integers big-endian): `[state u8][attempt u32][not-before-ms i64][outcome-status u8]`
/// `[worker-len u8][worker][service-len u8][service][outcome…]` — the outcome (the result, or a
/// failure's error body) is the rest of the frame.
public struct JobReport: Sendable, Equatable {
    public var state: JobState
    /// Executions started so far (a job running when its worker or the broker died runs again).
    public var attempt: UInt32
    /// For a scheduled job, when it may start (milliseconds since 1970); else 0.
    public var notBeforeMilliseconds: Int64
    /// How the job ended: `ok` with the result, or the failure's status with its error body.
    public var outcomeStatus: ReplyStatus
    /// The worker running it, while it runs.
    public var worker: String
    public var service: String
    public var outcome: [UInt8]

    public init(
        state: JobState, attempt: UInt32 = 0, notBeforeMilliseconds: Int64 = 0, outcomeStatus: ReplyStatus = .ok,
        worker: String = "", service: String = "", outcome: [UInt8] = []
    ) {
        self.state = state
        self.attempt = attempt
        self.notBeforeMilliseconds = notBeforeMilliseconds
        self.outcomeStatus = outcomeStatus
        self.worker = worker
        self.service = service
        self.outcome = outcome
    }

    public func encode() -> [UInt8] {
        let workerBytes = Array(worker.utf8.prefix(255))
        let serviceBytes = Array(service.utf8.prefix(255))
        var bytes: [UInt8] = [state.rawValue]
        bytes.reserveCapacity(32 + workerBytes.count + serviceBytes.count + outcome.count)
        WireFormat.append(attempt, to: &bytes)
        WireFormat.append(notBeforeMilliseconds, to: &bytes)
        bytes.append(outcomeStatus.rawValue)
        bytes.append(UInt8(workerBytes.count))
        bytes += workerBytes
        bytes.append(UInt8(serviceBytes.count))
        bytes += serviceBytes
        bytes += outcome
        return bytes
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let raw = try reader.byte("job state")
        guard let state = JobState(rawValue: raw) else {
            throw .invalidValue(name: "job state", reason: "unknown state \(raw)")
        }
        self.state = state
        attempt = try reader.uint32("attempt")
        notBeforeMilliseconds = Int64(bitPattern: try reader.uint64("not-before"))
        let status = try reader.byte("outcome status")
        guard let outcomeStatus = ReplyStatus(rawValue: status) else {
            throw .invalidValue(name: "outcome status", reason: "unknown status \(status)")
        }
        self.outcomeStatus = outcomeStatus
        worker = String(decoding: try reader.take(Int(try reader.byte("worker length")), "worker"), as: UTF8.self)
        service = String(decoding: try reader.take(Int(try reader.byte("service length")), "service"), as: UTF8.self)
        outcome = reader.rest()
    }
}
