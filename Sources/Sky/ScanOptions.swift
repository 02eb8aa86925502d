/// How one call runs: its timeouts, its retries, and whether it may share an execution.
///
/// A client holds defaults (``SkyClient/Configuration/defaults``); a call may pass its own.
public struct ScanOptions: Sendable, Equatable {
    /// How long one attempt may wait for its reply; `nil` waits as long as it takes. The broker
    /// gets it too: a request still waiting for a worker then is answered `timeout` there.
    public var timeout: Duration?
    /// How long the whole call may take, every attempt and backoff included; `nil` bounds it
    /// only by ``retry``'s attempts × ``timeout``. When it passes, the call throws
    /// ``SkyError/timeout(_:)`` and the task is cancelled at the broker.
    public var deadline: Duration?
    public var retry: RetryPolicy
    /// Share one remote execution with concurrent calls of an equal task (same service, same
    /// encoded payload). Turn it off for tasks that must run once per call.
    public var coalesce: Bool

    public init(
        timeout: Duration? = .seconds(30), deadline: Duration? = nil, retry: RetryPolicy = .default,
        coalesce: Bool = true
    ) {
        self.timeout = timeout
        self.deadline = deadline
        self.retry = retry
        self.coalesce = coalesce
    }

    /// 30 s per attempt, no overall deadline, ``RetryPolicy/default``, coalescing on.
    public static let `default` = ScanOptions()
}
