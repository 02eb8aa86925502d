import Foundation
import SkyProtocol
import SkyWire

/// How a durable job runs: when, in what order, how often, and how long its outcome is kept.
///
/// The broker applies all of it, since the client that submitted the job may be long gone.
public struct JobOptions: Sendable, Equatable {
    /// Not started before this long after the broker recorded the job (kept across restarts).
    public var delay: Duration?
    /// Not started before this wall-clock time (kept across restarts).
    public var notBefore: Date?
    /// Among waiting jobs of a service, higher priority runs first.
    public var priority: JobPriority
    /// A second submit with the same key, while the first job is kept (its retention), returns
    /// the first job instead of making another. At most 255 bytes.
    public var idempotencyKey: String?
    /// Attempts, backoff between them, and which failures are tried again; applied by the
    /// broker. ``RetryPolicy/jitter`` is not used (the broker spaces retries by itself).
    public var retry: RetryPolicy
    /// How long the outcome is kept after the job ended (24 hours by default; a second at least).
    public var retention: Duration
    /// How long one attempt may run (more than zero); `nil` for no limit. A timed-out attempt is cancelled on
    /// its worker and counts as a `timeout` failure for ``retry``.
    public var timeout: Duration?
    /// How long `submit` waits for the broker to confirm that the job is recorded before it
    /// fails with ``SkyError/journalUnavailable(_:)``, so that a store that hangs fails submits
    /// promptly instead of after the broker's own bound on it. The job may still be recorded
    /// after such a failure, and then runs: submit again with the same ``idempotencyKey`` to
    /// get its id. `nil`: as long as the broker takes to record the job or fail. Applied by a
    /// broker that reads version 2 of the submission (docs/protocol.md); an older one waits as
    /// with `nil`. The broker checks it at its tick, so the answer may come a tick later.
    public var confirmWithin: Duration?
    /// Makes ``idempotencyKey`` a unique job's key, held only while the job waits
    /// (``Unique/whileQueued``), until it ends (``Unique/whileRunning``) or for a time after its
    /// submit (``Unique/for(_:)``): a second submit with the key meanwhile returns this job,
    /// one after it makes a new job. `nil`: the key holds
    /// while the job is kept (its retention included). Needs the key, and a broker that reads
    /// version 3 of the submission (docs/jobs.md, "Unique jobs").
    public var unique: Unique?
    /// The key this job shares a concurrency limit and its turns with (a customer, a tenant):
    /// the broker takes a service's waiting jobs round-robin across keys, so one key's backlog
    /// delays another key's job by at most one turn per key (docs/jobs.md, "Concurrency keys
    /// and fairness"). Jobs without a key take their turns as one key of their own. A name:
    /// 1–255 bytes of UTF-8 without control characters. Needs a broker that reads version 4 of
    /// the submission.
    public var concurrencyKey: String?
    /// At most this many jobs of ``concurrencyKey`` run at once (1 to 1,000,000); `nil` for no
    /// limit (turns only). Each job is held to its own limit. Needs ``concurrencyKey``.
    public var concurrencyLimit: Int?

    /// How long a unique job's key keeps a second job of the key from being made.
    public enum Unique: Sendable, Equatable {
        /// Until the job is first sent to a worker: at most one job of the key waits.
        case whileQueued
        /// Until the job ended (succeeded, failed or cancelled): at most one job of the key
        /// waits or runs.
        case whileRunning
        /// For this long after the job was submitted (1 s to 366 days), whatever it became
        /// meanwhile: at most one job of the key is submitted in that time. The job's outcome
        /// is kept at least as long (``JobOptions/retention`` is raised to it).
        case `for`(Duration)
    }

    public init(
        delay: Duration? = nil, notBefore: Date? = nil, priority: JobPriority = .normal, idempotencyKey: String? = nil,
        unique: Unique? = nil, concurrencyKey: String? = nil, concurrencyLimit: Int? = nil,
        retry: RetryPolicy = .default, retention: Duration = .seconds(86_400),
        timeout: Duration? = nil, confirmWithin: Duration? = JobOptions.defaultConfirmWithin
    ) {
        self.unique = unique
        self.concurrencyKey = concurrencyKey
        self.concurrencyLimit = concurrencyLimit
        self.delay = delay
        self.notBefore = notBefore
        self.priority = priority
        self.idempotencyKey = idempotencyKey
        self.retry = retry
        self.retention = retention
        self.timeout = timeout
        self.confirmWithin = confirmWithin
    }

    /// ``confirmWithin``'s default: a submit fails within a second when the store does not
    /// answer, counting the broker's tick (a tenth of its heartbeat interval, 100 ms by
    /// default) and the trip back.
    public static let defaultConfirmWithin: Duration = .milliseconds(850)

    /// Times that mean nothing are refused, as ``ScanOptions``' are: they were clamped (a
    /// timeout of zero ran each attempt for 1 ms, a retention of zero forgot the outcome as it
    /// was written).
    private func checkTimes() throws(SkyError) {
        if let timeout, timeout <= .zero {
            throw .invalidTask("JobOptions.timeout is \(timeout): give each attempt a positive time, or nil for none")
        }
        if retention < .seconds(1) {
            throw .invalidTask(
                "JobOptions.retention is \(retention): keep the outcome at least a second, so that callers can read it")
        }
        if let delay, delay < .zero {
            throw .invalidTask(
                "JobOptions.delay is \(delay): give a time from now (zero or more), or nil to start at once")
        }
        if let confirmWithin, confirmWithin <= .zero {
            throw .invalidTask(
                "JobOptions.confirmWithin is \(confirmWithin): give a positive time, or nil to wait as long as the broker does"
            )
        }
    }

    /// The submission the broker reads; it carries ``confirmWithin`` if `confirming` (the
    /// broker reads version 2 of the submission).
    func submission(
        service: String, body: [UInt8], key: String, confirming: Bool = false
    ) throws(SkyError) -> JobSubmission {
        let most = unique == nil ? JobSubmission.maxKeyLength : JobSubmission.maxUniqueKeyLength
        guard key.utf8.count <= most, !key.isEmpty else {
            throw .invalidTask(
                "\(unique == nil ? "an idempotency key" : "a unique job's key") must be 1...\(most) bytes; this one has \(key.utf8.count)"
            )
        }
        try checkTimes()
        var submission = JobSubmission(service: service, body: body)
        submission.priority = priority.rawValue
        // Clamped to what an Int64 of milliseconds holds: a date of year 300,000,000 means "never".
        submission.notBeforeMilliseconds =
            notBefore.map { Int64(min(9.0e18, max(0, ($0.timeIntervalSince1970 * 1000).rounded(.up)))) } ?? 0
        submission.delayMilliseconds = UInt64(clamping: max(0, delay?.wholeMilliseconds ?? 0))
        submission.retentionMilliseconds = UInt64(clamping: max(0, retention.wholeMilliseconds))
        submission.timeoutMilliseconds = timeout.map { UInt32(clamping: max(1, $0.wholeMilliseconds)) } ?? 0
        submission.maxAttempts = UInt16(clamping: retry.usedMaxAttempts)
        submission.initialBackoffMilliseconds = UInt32(clamping: max(0, retry.initialBackoff.wholeMilliseconds))
        submission.maxBackoffMilliseconds = UInt32(clamping: max(0, retry.maxBackoff.wholeMilliseconds))
        submission.multiplierPercent = UInt16(min(65_535, (retry.usedMultiplier * 100).rounded()))
        submission.retryOn = retry.retryOn.flatMap(\.replyStatuses).sorted { $0.rawValue < $1.rawValue }
        submission.idempotencyKey = key
        switch unique {
        case nil: submission.keyHold = .kept
        case .whileQueued: submission.keyHold = .whileQueued
        case .whileRunning: submission.keyHold = .whileRunning
        case .for(let time):
            let milliseconds = UInt64(clamping: max(0, time.wholeMilliseconds))
            guard JobSubmission.keyHoldRange.contains(milliseconds) else {
                throw .invalidTask("a unique job's key holds for 1 s to 366 days, not \(time)")
            }
            submission.keyHold = .forTime
            submission.keyHoldMilliseconds = milliseconds
            // The key lives in the job's record: kept as long as the key holds.
            submission.retentionMilliseconds = max(submission.retentionMilliseconds, milliseconds)
        }
        if let concurrencyKey {
            if let problem = WireFormat.nameProblem(concurrencyKey, what: "concurrency key") {
                throw .invalidTask(problem)
            }
            submission.concurrencyKey = concurrencyKey
        }
        if let concurrencyLimit {
            guard concurrencyKey != nil else {
                throw .invalidTask(
                    "a concurrency limit needs its key: JobOptions(concurrencyKey: \"customer-42\", concurrencyLimit: \(concurrencyLimit))"
                )
            }
            guard (1...Int(JobSubmission.maxConcurrencyLimit)).contains(concurrencyLimit) else {
                throw .invalidTask(
                    "a concurrency limit is 1...\(JobSubmission.maxConcurrencyLimit) jobs at once; got \(concurrencyLimit)"
                )
            }
            submission.concurrencyLimit = UInt32(concurrencyLimit)
        }
        if confirming, let confirmWithin {
            submission.confirmWithinMilliseconds = UInt32(clamping: max(1, confirmWithin.wholeMilliseconds))
        }
        return submission
    }
}

/// The order of waiting jobs within a service.
public struct JobPriority: RawRepresentable, Sendable, Hashable, Comparable {
    public var rawValue: Int8
    public init(rawValue: Int8) { self.rawValue = rawValue }

    public static let low = JobPriority(rawValue: -50)
    public static let normal = JobPriority(rawValue: 0)
    public static let high = JobPriority(rawValue: 50)
    public static let urgent = JobPriority(rawValue: 100)

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

extension SkyError.Code {
    /// The reply statuses a broker-applied retry policy names for this kind of error.
    var replyStatuses: [ReplyStatus] {
        switch self {
        case .timeout: [.deadlineExceeded]
        case .workerLost: [.workerLost]
        case .remote: [.handlerError]
        case .internalError: [.internalError]
        case .invalidPayload: [.invalidPayload]
        case .unknownService: [.unknownService]
        default: []
        }
    }
}
