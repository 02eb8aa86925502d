/// All the broker knows of one job, as `mmi.jobs.describe` answers it (JSON, unknown keys to be
/// ignored): what `skyctl jobs show` prints. Times are milliseconds since 1970 on the broker's
/// clock; a field the job has no value for is absent.
public struct JobDetails: Codable, Sendable, Equatable {
    /// The job's id, as text (26 characters).
    public var id: String
    /// `queued`, `scheduled`, `running`, `succeeded`, `failed`, `cancelled`, or `unknown` (never
    /// submitted to this broker's store, or deleted after its retention).
    public var state: String
    public var service: String?
    /// Executions started so far, and how many its retry policy allows.
    public var attempt: Int?
    public var maxAttempts: Int?
    public var priority: Int?
    public var submittedAt: Int64?
    /// When a scheduled job (a delay, a not-before time, a retry's backoff) may start.
    public var notBefore: Int64?
    /// When its latest attempt was sent to a worker (for an ended job, as recorded with its
    /// outcome; absent for jobs that ended before the broker recorded it).
    public var startedAt: Int64?
    public var endedAt: Int64?
    /// When its record is deleted (an ended job's retention).
    public var expiresAt: Int64?
    /// The worker running it.
    public var worker: String?
    /// How long one attempt may run.
    public var timeoutMilliseconds: Int?
    /// Its idempotency key as recorded (a unique job's behind its hold's prefix).
    public var idempotencyKey: String?
    public var concurrencyKey: String?
    public var concurrencyLimit: Int?
    /// How it ended: `ok`, or the failure's status name.
    public var outcomeStatus: String?
    /// A failed or cancelled job's error.
    public var errorType: String?
    public var errorMessage: String?
    /// A succeeded job's result size in bytes (the result itself: `mmi.jobs.wait`).
    public var resultBytes: Int?
    /// The job this one runs again (a retry made by `mmi.jobs.bulk`), and the job that runs
    /// this one again.
    public var retryOf: String?
    public var retriedAs: String?
    /// What its handler last said of its progress (`TaskContext.progress(_:_:)`): how
    /// far (0 to 1), what it was doing, and when it said so. An attempt starts without them.
    public var progress: Double?
    public var progressMessage: String?
    public var progressAt: Int64?
    /// Its handlers' last log lines (`TaskContext.log(_:)`), oldest first, across its
    /// attempts; `droppedLogLines` older ones gave way to them.
    public var log: [String]?
    public var droppedLogLines: Int?

    public init(id: String, state: String) {
        self.id = id
        self.state = state
    }

    /// Takes the progress and log lines the broker keeps.
    package mutating func show(_ kept: JobProgress) {
        progress = kept.fraction
        progressMessage = kept.message
        progressAt = kept.updatedAt
        log = kept.lines.isEmpty ? nil : kept.lines
        droppedLogLines = kept.droppedLines > 0 ? kept.droppedLines : nil
    }
}
