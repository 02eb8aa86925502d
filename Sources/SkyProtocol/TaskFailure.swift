/// A task that ended in failure, as `broker.stats` samples them for dashboards: what failed,
/// where, and the error's type and message as the handler (or the broker) gave them.
public struct TaskFailure: Codable, Sendable, Equatable {
    /// The request id, hex.
    public var requestID: String
    public var service: String
    /// The reply status (`handlerError`, `deadlineExceeded`, `workerLost`, …).
    public var status: String
    /// The error's Swift type, or the kind of failure for broker-made answers.
    public var type: String
    /// The error's message, cut to ``maxMessageCharacters``.
    public var message: String
    /// The name of the worker that answered or held the task, when there was one.
    public var worker: String?

    /// Failures one `broker.stats` carries at most: the first of its period. `failed` counts
    /// them all; a storm of failures costs the broker no more than this many samples a period.
    public static let maxPerPeriod = 10
    /// Longer messages are cut, so that one sample stays small whatever a handler throws.
    public static let maxMessageCharacters = 300

    public init(requestID: String, service: String, status: String, type: String, message: String, worker: String?) {
        self.requestID = requestID
        self.service = service
        self.status = status
        self.type = type
        self.message =
            message.count > Self.maxMessageCharacters
            ? String(message.prefix(Self.maxMessageCharacters - 1)) + "…" : message
        self.worker = worker
    }
}
