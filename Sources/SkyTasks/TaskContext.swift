import Logging
import SkyProtocol
import Synchronization

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
    /// Opens the sink of the worker's I/O thread, for the first report; nil where reports go
    /// nowhere (the client's local fallback, a context made in a test).
    private let progressTarget: ProgressTarget?

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

    /// Says how far the handler is (`fraction`, from 0 to 1) and, if given, what it does now.
    ///
    /// For a durable job, the broker keeps the last fraction and message with the job:
    /// `skyctl jobs show`, skyweb, `SkyClient.details(of:)` and the `job.progress`
    /// event show them, also after the job ended. For a call, and on a broker that predates
    /// progress, they go nowhere. Cheap enough to call in a loop: the worker sends what is new
    /// at most once a tick. A fraction outside 0...1 is taken as the nearer end, one that is
    /// not a number is ignored; a message is cut to `ProgressReport.maxMessageBytes`, its
    /// control characters made spaces (docs/worker.md has the figures).
    public func progress(_ fraction: Double, _ message: String? = nil) {
        guard let progressTarget else { return }
        let fraction = fraction.isNaN ? nil : min(max(fraction, 0), 1)
        let message = message.map { ProgressReport.fitted($0, limit: ProgressReport.maxMessageBytes) }
        progressTarget.sink.report(fraction: fraction, message: message, line: nil)
    }

    /// Adds a line to the job's log: the broker keeps a durable job's last lines (within
    /// `JobProgress`'s bounds; older lines give way), shown with its progress. Cut and cleaned
    /// as a message is. For a call it goes nowhere; ``logger`` is the worker's own log.
    public func log(_ line: String) {
        guard let progressTarget else { return }
        progressTarget.sink.report(
            fraction: nil, message: nil, line: ProgressReport.fitted(line, limit: ProgressReport.maxLineBytes))
    }

    /// The context of `request`, whose handler starts at `started`; `progress`: where its
    /// reports go (the worker's sink, made on the first report), nil for nowhere.
    package init(
        request: TaskRequest, started: ContinuousClock.Instant, logger: Logger?,
        progress: (@Sendable () -> ProgressSink)? = nil
    ) {
        service = request.service
        attempt = Int(request.header.attempt)
        let timeout = request.header.timeoutMilliseconds
        deadline = timeout > 0 ? started + .milliseconds(timeout) : nil
        id = request.requestID
        baseLogger = logger
        progressTarget = progress.map(ProgressTarget.init)
    }

    /// A context of your own making, to call a handler with in a test.
    public init(service: String, attempt: Int = 1, deadline: ContinuousClock.Instant? = nil, logger: Logger? = nil) {
        self.service = service
        self.attempt = attempt
        self.deadline = deadline
        id = .random()
        baseLogger = logger
        progressTarget = nil
    }
}

/// The sink of one handler's reports, made on its first report and shared by the copies of its
/// context.
private final class ProgressTarget: Sendable {
    private let open: @Sendable () -> ProgressSink
    private let opened = Mutex<ProgressSink?>(nil)

    init(_ open: @escaping @Sendable () -> ProgressSink) {
        self.open = open
    }

    var sink: ProgressSink {
        opened.withLock { opened in
            if let opened { return opened }
            let sink = open()
            opened = sink
            return sink
        }
    }
}
