/// A durable job as the journal keeps it: what was asked, and where it stands.
public struct JobRecord: Sendable, Equatable {
    /// Where a job stands. Queued and running jobs are unfinished: the broker queues them again
    /// when it starts.
    public enum State: Int64, Sendable, Equatable {
        case queued = 0
        case running = 1
        case succeeded = 2
        case failed = 3
        case cancelled = 4

        public var isFinished: Bool { self.rawValue >= State.succeeded.rawValue }
    }

    /// 16 bytes, unique (the broker makes them).
    public var id: [UInt8]
    public var service: String
    public var body: [UInt8]
    /// Higher first within a service.
    public var priority: Int
    /// Not started before this time (milliseconds since 1970); 0 for at once.
    public var notBefore: Int64
    /// A second submit with the same key returns this job instead of making another.
    public var idempotencyKey: String?
    public var state: State
    /// Deliveries so far (a job running when the broker died is delivered again: at least once).
    public var attempt: Int
    /// The result (succeeded) or the error body (failed).
    public var outcome: [UInt8]?
    /// When the job and its outcome may be deleted (milliseconds since 1970).
    public var expiresAt: Int64
    /// When the broker recorded it (milliseconds since 1970).
    public var submittedAt: Int64
    /// How it runs (retries, timeout, retention), in the submitter's encoding; the store keeps
    /// it as it is.
    public var options: [UInt8]
    /// When its last attempt was sent to a worker, and when it ended (milliseconds since 1970,
    /// the broker's clock); 0 for not yet, or unknown (recorded with the outcome since
    /// 2026-11-30).
    public var startedAt: Int64 = 0
    public var endedAt: Int64 = 0
    /// What its handlers reported of their progress and their last log lines, in the broker's
    /// encoding (the store keeps it as it is), recorded with the outcome; nil if none reported.
    public var progress: [UInt8]? = nil

    public init(
        id: [UInt8], service: String, body: [UInt8], priority: Int = 0, notBefore: Int64 = 0,
        idempotencyKey: String? = nil, state: State = .queued, attempt: Int = 0, outcome: [UInt8]? = nil,
        expiresAt: Int64, submittedAt: Int64 = 0, options: [UInt8] = []
    ) {
        self.id = id
        self.service = service
        self.body = body
        self.priority = priority
        self.notBefore = notBefore
        self.idempotencyKey = idempotencyKey
        self.state = state
        self.attempt = attempt
        self.outcome = outcome
        self.expiresAt = expiresAt
        self.submittedAt = submittedAt
        self.options = options
    }
}

/// A recurring job as the journal keeps it: its definition in the submitter's encoding (the
/// store keeps it as it is), when it fires next, and the job its last tick made.
public struct ScheduleRecord: Sendable, Equatable {
    /// Unique: saving a schedule of a name that exists replaces its definition.
    public var name: String
    public var spec: [UInt8]
    /// Milliseconds since 1970. A tick is recorded with its job, in one transaction: the job
    /// of a tick is made once, whatever restarts.
    public var nextFire: Int64
    public var lastJob: [UInt8]?

    public init(name: String, spec: [UInt8], nextFire: Int64, lastJob: [UInt8]? = nil) {
        self.name = name
        self.spec = spec
        self.nextFire = nextFire
        self.lastJob = lastJob
    }
}

/// One change to the journal. A batch of them is written in one transaction.
/// Which jobs a bulk action reads (``JobStore/select(_:after:limit:)``): those that match every
/// field given.
public struct JobSelection: Sendable, Equatable {
    public var state: JobRecord.State?
    public var service: String?
    /// Submitted at or after this time (milliseconds since 1970).
    public var submittedAfter: Int64?
    /// Submitted before this time.
    public var submittedBefore: Int64?

    public init(
        state: JobRecord.State? = nil, service: String? = nil, submittedAfter: Int64? = nil,
        submittedBefore: Int64? = nil
    ) {
        self.state = state
        self.service = service
        self.submittedAfter = submittedAfter
        self.submittedBefore = submittedBefore
    }
}

/// A job a selection found: enough to filter it by its error and to act on it, without its
/// task (which may be large).
public struct JobMatch: Sendable, Equatable {
    /// Its place in the store's order (a page starts after the last one's).
    public var seq: Int64
    public var id: [UInt8]
    public var state: JobRecord.State
    public var service: String
    public var idempotencyKey: String?
    /// A failed or cancelled job's outcome (its status byte, then its error body); `nil` for
    /// the others.
    public var outcome: [UInt8]?

    public init(
        seq: Int64, id: [UInt8], state: JobRecord.State, service: String, idempotencyKey: String? = nil,
        outcome: [UInt8]? = nil
    ) {
        self.seq = seq
        self.id = id
        self.state = state
        self.service = service
        self.idempotencyKey = idempotencyKey
        self.outcome = outcome
    }
}

public enum JobChange: Sendable, Equatable {
    /// A new job. If its idempotency key is already taken, nothing is written (the caller
    /// looks the first job up with ``JobStore/job(idempotencyKey:)``).
    case submitted(JobRecord)
    /// A delivery of the job started (its attempt number).
    case started(id: [UInt8], attempt: Int)
    /// A start recorded ahead (prepared) is taken back before the job reached a worker: the
    /// job is queued again with `attempt`, the executions that did start, so that a broker
    /// restarted later does not count the start that never happened.
    case released(id: [UInt8], attempt: Int)
    /// An attempt failed and the job waits for its next, not before `notBefore` (milliseconds
    /// since 1970): a retry's backoff, kept across restarts like a delay.
    case rescheduled(id: [UInt8], notBefore: Int64)
    /// The job ended: succeeded, failed or cancelled, with its outcome, kept until `expiresAt`.
    /// `startedAt` and `endedAt`: when its last attempt was sent to a worker (0 if it never
    /// was) and when it ended, milliseconds since 1970; `progress`: its handlers' last report
    /// (``JobRecord/progress``).
    case finished(
        id: [UInt8], state: JobRecord.State, outcome: [UInt8]?, expiresAt: Int64, startedAt: Int64 = 0,
        endedAt: Int64 = 0, progress: [UInt8]? = nil)
    /// The unfinished job gives up its idempotency key, which a new job may then take (a
    /// unique job's key, held while it waits or while it runs). Before a `finished` of the
    /// same job: an ended job's key is left as it is.
    case keyReleased(id: [UInt8])
    /// The job gives up its idempotency key whatever its state: a key held for a time that
    /// passed. Before a `submitted` that takes the key, in the same transaction.
    case keyExpired(id: [UInt8])
    /// An ended job is kept until `expiresAt` instead: a flow's step, kept as long as its flow
    /// (a step's outcome is the flow's record of its progress: a step deleted before its flow
    /// ended would run again when the flow is taken up after a restart).
    case retained(id: [UInt8], expiresAt: Int64)
    /// A schedule made or changed: its definition and next tick (its last job is kept).
    case scheduleSaved(ScheduleRecord)
    /// A schedule's tick passed: its next, and the job the tick made (written in the same
    /// transaction), if it made one.
    case scheduleAdvanced(name: String, nextFire: Int64, lastJob: [UInt8]?)
    case scheduleRemoved(name: String)
    /// A service is paused (`paused`) or resumed: a paused service's work waits, across
    /// restarts, until it is resumed.
    case servicePaused(name: String, paused: Bool)
    /// A service's rate limit is set (`limit`: its form, as the broker encodes it) or removed
    /// (`nil`): kept across restarts.
    case serviceLimited(name: String, limit: [UInt8]?)
    /// An ended job is deleted (a bulk delete): its id is unknown from then on.
    case deleted(id: [UInt8])
    /// The broker's counts of jobs (``JobTotals``), replacing the saved ones.
    case totalsSaved(JobTotals)
}

extension JobChange {
    /// The row the change is about: a job's 16-byte id, or for a schedule a key longer than
    /// any job id (a mark, 16 zero bytes, its name), so that the two never meet.
    public var rowKey: [UInt8] {
        switch self {
        case .submitted(let job): job.id
        case .started(let id, _), .released(let id, _), .rescheduled(let id, _), .finished(let id, _, _, _, _, _, _),
            .keyReleased(let id), .keyExpired(let id), .retained(let id, _), .deleted(let id):
            id
        case .scheduleSaved(let schedule): Self.scheduleKey(schedule.name)
        case .scheduleAdvanced(let name, _, _), .scheduleRemoved(let name): Self.scheduleKey(name)
        case .servicePaused(let name, _): [0xFE] + [UInt8](repeating: 0, count: 16) + Array(name.utf8)
        case .serviceLimited(let name, _): [0xFD] + [UInt8](repeating: 0, count: 16) + Array(name.utf8)
        case .totalsSaved: [0xFC] + [UInt8](repeating: 0, count: 16)
        }
    }

    private static func scheduleKey(_ name: String) -> [UInt8] {
        [0xFF] + [UInt8](repeating: 0, count: 16) + Array(name.utf8)
    }
}

extension JobRecord {
    /// Whether `other` records the same submit (what a job's later changes leave as it was):
    /// a submit whose id is taken by another is reported, one repeated is not.
    public func isSameSubmit(as other: JobRecord) -> Bool {
        (submittedAt, service, body, options) == (other.submittedAt, other.service, other.body, other.options)
    }
}

/// What a transaction found besides success: submits whose idempotency key an earlier job
/// holds, or whose id an earlier job has, each with that job (the new one was not written).
public struct JournalReceipt: Sendable, Equatable {
    public var duplicates: [[UInt8]: JobRecord] = [:]

    public init(duplicates: [[UInt8]: JobRecord] = [:]) {
        self.duplicates = duplicates
    }
}
