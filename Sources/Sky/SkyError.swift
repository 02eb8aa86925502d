import SkyProtocol

/// Everything a `scan` can fail with. Each case's description says what happened and what to do.
public enum SkyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The task's handler threw on the worker; `type` is the Swift type of its error.
    case remote(type: String, message: String)
    /// No worker (or broker service) serves this service.
    case unknownService(String)
    /// The worker could not decode the task.
    case invalidPayload(String)
    /// The broker's queue is full.
    case overloaded(String)
    /// No worker serves the service and none joined before the deadline.
    case noWorkers(String)
    /// The workers running the task kept dying.
    case workerLost(String)
    /// The deadline passed before the task could finish.
    case timeout(String)
    /// The broker is shutting down.
    case brokerShuttingDown(String)
    /// The task was cancelled on the worker.
    case cancelled(String)
    /// The worker or broker failed internally.
    case internalError(String)
    /// The result could not be decoded as the task's result type.
    case invalidResult(String)
    /// The task could not be encoded.
    case invalidTask(String)
    /// The client was closed while the call was waiting, or before it started.
    case clientClosed

    init(status: ReplyStatus, body: [UInt8], service: String) {
        let error = RemoteErrorBody(decoding: body)
        switch status {
        case .ok: self = .internalError("a success reply was treated as a failure")
        case .handlerError: self = .remote(type: error.type, message: error.message)
        case .unknownService: self = .unknownService(error.message)
        case .invalidPayload: self = .invalidPayload(error.message)
        case .overloaded: self = .overloaded(error.message)
        case .noWorkers: self = .noWorkers(error.message)
        case .workerLost: self = .workerLost(error.message)
        case .deadlineExceeded: self = .timeout(error.message)
        case .brokerShuttingDown: self = .brokerShuttingDown(error.message)
        case .cancelled: self = .cancelled(error.message)
        case .internalError: self = .internalError(error.message)
        }
    }

    public var description: String {
        switch self {
        case .remote(let type, let message):
            "the task's handler failed with \(type): \(message). Fix the handler or the task; retrying will not help."
        case .unknownService(let message):
            "\(message). Start a worker that serves this service, or check the service name."
        case .invalidPayload(let message):
            "\(message). Client and worker disagree on the task type; deploy matching versions."
        case .overloaded(let message): "the broker is overloaded: \(message). Retry later or add workers."
        case .noWorkers(let message): "no worker serves this service: \(message). Start one."
        case .workerLost(let message): "the workers running this task were lost: \(message)."
        case .timeout(let message): "the task timed out: \(message). Raise the timeout or add workers."
        case .brokerShuttingDown(let message): "the broker is shutting down: \(message). Retry once it is back."
        case .cancelled(let message): "the task was cancelled: \(message)."
        case .internalError(let message): "internal error: \(message)."
        case .invalidResult(let message):
            "the result could not be decoded: \(message). Client and worker disagree on the result type."
        case .invalidTask(let message): "the task could not be encoded: \(message)."
        case .clientClosed: "the client was closed; create a new SkyClient."
        }
    }
}
