import Logging
import SkyProtocol

/// What a handler knows of the task it runs: the service, the request, which attempt this is,
/// how long its caller allows it, and a logger with those facts in its metadata.
///
/// A handler registered with ``ScanSystem/registerWithContext(_:coder:handler:)`` takes it as
/// its second parameter; pass it on to what needs it (it is `Sendable`). Only such handlers get
/// one made: the others cost what they did.
///
/// ```swift
/// await system.registerWithContext(Resize.self) { task, context in
///     let logger = context.logger
///     logger.info("resizing", metadata: ["url": "\(task.url)"])
///     if let deadline = context.deadline, deadline < .now + .seconds(1) { throw NotEnoughTime() }
///     return try await resize(task)
/// }
/// ```
public struct TaskContext: Sendable {
    /// The service the task was sent to.
    public let service: String
    /// The attempt number the request carries. For a call, the client's: 1 for its first send,
    /// raised by each retry and by a send again after a reconnect (a redelivery by the broker
    /// after a lost worker keeps it). For a durable job: the executions started so far, counted
    /// across broker restarts.
    public let attempt: Int
    /// The attempt's timeout (the caller's `ScanOptions.timeout`, a job's `JobOptions.timeout`),
    /// counted from the handler's start; `nil` without one (jobs have none unless asked). The
    /// caller's own count started when it sent the attempt, and the broker's when the request
    /// arrived, so the caller may stop waiting before it by as long as the request queued.
    public let deadline: ContinuousClock.Instant?
    private let id: RequestID
    private let baseLogger: Logger?

    /// The request's id (32 hex digits), as the broker's log lines about a request name it: the
    /// same for every attempt of a call, and shared by callers whose equal calls were coalesced.
    /// (Job events name a job's attempts by ``jobID``.)
    public var requestID: String { id.description }

    /// The same 16 bytes in the form of a job's id. For a durable job's attempt, that is the
    /// job's id, as `Job.id`, `skyctl jobs` and job events show it; for a call, it is well formed
    /// but names no job. (A worker runs a job's attempt as a request under its job's id, and
    /// cannot tell the one from the other.)
    public var jobID: String { JobID(id).description }

    /// A logger with `sky.service`, `sky.request_id` and `sky.attempt` in its metadata (the
    /// names of the tracing attributes): the worker's logger, or one labelled `sky.task` for a
    /// task the client's local fallback runs. Made anew on each read, so that a handler that
    /// does not log pays nothing for it: read it once per handler.
    public var logger: Logger {
        var logger = baseLogger ?? Logger(label: "sky.task")
        logger[metadataKey: "sky.service"] = "\(service)"
        logger[metadataKey: "sky.request_id"] = "\(requestID)"
        logger[metadataKey: "sky.attempt"] = "\(attempt)"
        return logger
    }

    /// The context of `request`, whose handler starts at `started`.
    package init(request: TaskRequest, started: ContinuousClock.Instant, logger: Logger?) {
        service = request.service
        attempt = Int(request.header.attempt)
        let timeout = request.header.timeoutMilliseconds
        deadline = timeout > 0 ? started + .milliseconds(timeout) : nil
        id = request.requestID
        baseLogger = logger
    }

    /// A context of your own making, to call a handler with in a test.
    public init(service: String, attempt: Int = 1, deadline: ContinuousClock.Instant? = nil, logger: Logger? = nil) {
        self.service = service
        self.attempt = attempt
        self.deadline = deadline
        id = .random()
        baseLogger = logger
    }
}
