import SkyProtocol

/// Everything a `scan` can fail with, as one enum to switch over. Each case's description says
/// what happened and what to do. Swift task cancellation is not in here: a cancelled caller gets
/// `CancellationError`, as everywhere in Swift.
public enum SkyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No attempt was answered within its timeout, or the call's overall deadline passed.
    case timeout(String)
    /// The broker's queue is full; nothing was queued.
    case overloaded(String)
    /// No connected worker serves `service`, and none joined within the broker's grace (2 s by
    /// default; ``SkyClient/Configuration/noWorkersGrace``), or before the call's deadline when
    /// that came first.
    case noWorkers(service: String)
    /// The workers running the task kept dying.
    case workerLost(String)
    /// The task's handler threw on the worker; `type` is the Swift type of its error.
    case remote(type: String, message: String)
    /// The broker did not admit this client: its key (or the lack of one), or a connection that
    /// no broker's clients socket would close during the handshake (the message says which).
    case unauthorized(String)
    /// The task was cancelled on the worker or at the broker (not by this caller).
    case cancelled(String)
    /// The client has no connection to the broker, or the broker is shutting down.
    case brokerUnreachable(String)
    /// No worker (or broker service) serves this service.
    case unknownService(String)
    /// The worker could not decode the task.
    case invalidPayload(String)
    /// The worker or broker failed internally.
    case internalError(String)
    /// The result could not be decoded as the task's result type.
    case invalidResult(String)
    /// The call cannot be made as asked, and was not run: the task could not be encoded, a
    /// service name or idempotency key is invalid, or a job to retry has not failed or been
    /// cancelled. The message says which.
    case invalidTask(String)
    /// The client was closed while the call was waiting, or before it started.
    case clientClosed
    /// The encoded task is larger than the broker accepts; it was not sent.
    case requestTooLarge(bytes: Int, limit: Int)
    /// The client is connected to the broker's workers endpoint, not its clients endpoint; the
    /// message names the right one. Every call fails with it until the client is remade.
    case wrongEndpoint(String)
    /// The broker's journal of jobs cannot be used: it runs without one (`--state-dir none`),
    /// the journal's disk is full or failing, or its PostgreSQL store is out of reach. Submits
    /// and job lookups fail until it is back; `scan` still works. A submit whose store
    /// connection broke during its commit, or that the store did not confirm within
    /// ``JobOptions/confirmWithin``, may have been recorded: submit again with the same
    /// idempotency key to be sure of one job.
    case journalUnavailable(String)
    /// The broker knows no job of this id: never submitted there, or kept past its retention.
    case jobNotFound(String)
    /// The call's deadline passed, or its caller left it, and the broker kept it as a durable
    /// job (``ScanOptions/keepIfAbandoned``) with this id: read its outcome with
    /// ``SkyClient/result(of:as:coder:)`` or ``SkyClient/status(of:)``, from this process or another.
    case keptAsJob(JobID)
    /// The service's rate limit at the broker would have made the call wait past its deadline
    /// (the calls ahead of it take the tokens until then), so the broker answered at once;
    /// `retryAfter` is how long it would have waited. Not retried by default: the backlog is
    /// what it is.
    case rateLimited(String, retryAfter: Duration)

    /// The broker did not answer: down, restarting or stalled (not a refusal, nor a mistake
    /// in the call). A job's waiter waits it out.
    var isOutage: Bool {
        switch self {
        case .brokerUnreachable, .timeout: true
        default: false
        }
    }

    /// The kind of an error without its message: what retry policies name.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        case timeout, overloaded, noWorkers, workerLost, remote, unauthorized, cancelled, brokerUnreachable
        case unknownService, invalidPayload, internalError, invalidResult, invalidTask, clientClosed
        case requestTooLarge, wrongEndpoint, journalUnavailable, jobNotFound, keptAsJob, rateLimited
    }

    public var code: Code {
        switch self {
        case .timeout: .timeout
        case .overloaded: .overloaded
        case .noWorkers: .noWorkers
        case .workerLost: .workerLost
        case .remote: .remote
        case .unauthorized: .unauthorized
        case .cancelled: .cancelled
        case .brokerUnreachable: .brokerUnreachable
        case .unknownService: .unknownService
        case .invalidPayload: .invalidPayload
        case .internalError: .internalError
        case .invalidResult: .invalidResult
        case .invalidTask: .invalidTask
        case .clientClosed: .clientClosed
        case .requestTooLarge: .requestTooLarge
        case .wrongEndpoint: .wrongEndpoint
        case .journalUnavailable: .journalUnavailable
        case .jobNotFound: .jobNotFound
        case .keptAsJob: .keptAsJob
        case .rateLimited: .rateLimited
        }
    }

    /// The error a failure reply to a call of `service` stands for.
    init(failure reply: TaskReply, service: String) {
        let error = RemoteErrorBody(decoding: reply.body)
        switch reply.status {
        case .ok: self = .internalError("a success reply was treated as a failure")
        case .handlerError: self = .remote(type: error.type, message: error.message)
        case .unknownService: self = .unknownService(error.message)
        case .invalidPayload
        where error.type == RemoteErrorBody.idInUseType || error.type == RemoteErrorBody.keyMissingType:
            self = .invalidTask(error.message)
        // The broker's own services read their arguments: a refusal is the caller's to change,
        // not a worker's disagreement on the task type.
        case .invalidPayload where service.hasPrefix(BrokerService.prefix): self = .invalidTask(error.message)
        case .invalidPayload: self = .invalidPayload(error.message)
        case .overloaded where error.type == RemoteErrorBody.rateLimitedType:
            self = .rateLimited(error.message, retryAfter: .milliseconds(max(0, error.retryAfterMs ?? 0)))
        case .overloaded: self = .overloaded(error.message)
        case .noWorkers: self = .noWorkers(service: service)
        case .workerLost: self = .workerLost(error.message)
        case .deadlineExceeded: self = .timeout(error.message)
        case .brokerShuttingDown: self = .brokerUnreachable(error.message)
        case .cancelled: self = .cancelled(error.message)
        case .internalError: self = .internalError(error.message)
        case .wrongEndpoint: self = .wrongEndpoint(error.message)
        case .journalUnavailable, .journalUnconfirmed: self = .journalUnavailable(error.message)
        case .keptAsJob: self = .keptAsJob(JobID(reply.requestID))
        }
    }

    public var description: String {
        switch self {
        case .timeout(let message) where message.contains(RequestTable.noConnection):
            "the task timed out: \(Self.clause(message)). Check that skybroker runs at the client's endpoint, then raise the timeout if the broker needs longer to come up."
        case .timeout(let message):
            "the task timed out: \(Self.clause(message)). Raise the timeout if the task needs longer, or add workers if it waited for one."
        // Status 4 comes from the broker (a queue, a limit, a write in progress) or from a worker
        // that holds its capacity: the message names which; the advice fits both.
        case .overloaded(let message):
            "refused as overloaded: \(Self.clause(message)). Retry later; if it goes on, add workers or raise the limit named."
        case .noWorkers(let service):
            "no connected worker serves \(service), and none joined in time (within the broker's no-workers grace, or before the call's deadline if that came first). Start a worker that serves \(service), or check the service name."
        case .workerLost(let message):
            // The broker's message says whose and how often ("the workers running it were lost 3 times").
            "workerLost: \(Self.clause(message)). Check the workers' logs: the task may crash them, or block their I/O thread past the broker's liveness window (an inline handler that runs too long)."
        case .remote(let type, let message):
            "the task's handler failed with \(type): \(Self.clause(message)). Fix the handler or the task; retry only a failure that passes (RetryPolicy.retryingHandlerErrors())."
        case .unauthorized(let message):
            "the broker did not admit this client: \(Self.clause(message)). Check the client's keys, the broker's allow-list and the endpoint."
        case .cancelled(let message): "the task was cancelled: \(Self.clause(message))."
        case .brokerUnreachable(let message):
            "the broker is unreachable: \(Self.clause(message)). Check that skybroker runs and that its clients endpoint is right."
        case .unknownService(let message):
            "\(Self.clause(message)). Check the service name, or start a worker that serves it."
        case .invalidPayload(let message):
            "\(Self.clause(message)). Check the payload against the task type (a client and a worker built from different versions of it disagree)."
        case .internalError(let message):
            "internal error in the broker or worker: \(Self.clause(message)). Report it with the logs of both."
        case .invalidResult(let message):
            "the result could not be decoded: \(Self.clause(message)). Client and worker disagree on the result type."
        case .invalidTask(let message):
            "refused: \(Self.clause(message)). Change the task or the arguments; retrying will not help."
        case .clientClosed: "the client was closed; create a new SkyClient."
        case .wrongEndpoint(let message):
            "the client is pointed at the wrong endpoint: \(Self.clause(message))."
        case .journalUnavailable(let message) where message.contains("keeps no journal"):
            "the broker takes no jobs: \(Self.clause(message))."
        case .journalUnavailable(let message):
            "the broker's journal of jobs cannot be used: \(Self.clause(message)). What must be recorded (submits, cancels, pauses, limits) fails until it works again; scan is not affected, and a submit made again with the same idempotency key makes no second job."
        case .jobNotFound(let message): "\(Self.clause(message))."
        case .rateLimited(let message, _):
            "the call was refused at once, its service's rate limit being reached: \(Self.clause(message))."
        case .keptAsJob(let id):
            "the call was left before its result and the broker kept it as job \(id); read its outcome with SkyClient.result(of:as:) or `skyctl jobs show \(id) --result`."
        case .requestTooLarge(let bytes, let limit):
            "the task encodes to \(bytes) bytes and the broker accepts at most \(limit) (SkyClient.Configuration.maxRequestBytes, skybroker --max-frame-size); it was not sent. Send a reference to the data instead, or raise both limits."
        }
    }
}

extension SkyError {
    /// A message to be followed by advice: without its own closing period (a decoding error's
    /// text ends with one, and "container.. Check" followed).
    static func clause(_ message: String) -> String {
        message.hasSuffix(".") ? String(message.dropLast()) : message
    }

    /// ``jobNotFound(_:)`` for `id`, in the one wording every caller uses.
    public static func jobNotFound(_ id: JobID) -> SkyError {
        .jobNotFound("the broker knows no job \(id): never submitted there, or kept past its retention")
    }
}
