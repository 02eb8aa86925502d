/// What a client's calls did, counted by its request table.
public struct ClientCounters: Sendable, Equatable {
    /// Remote calls made (coalesced ones included; local runs are counted apart).
    public var calls = 0
    /// Calls that joined an equal call in flight instead of running their own.
    public var coalesced = 0
    /// Requests handed to the socket, resends included.
    public var attemptsSent = 0
    /// Attempts started after a failed one (backoff, then a new attempt).
    public var retries = 0
    /// Requests sent again because the connection they went out on was lost.
    public var resentAfterReconnect = 0
    /// Replies whose id matched no call in flight (late, duplicate, or for a finished call).
    public var unmatchedReplies = 0
    /// Failure replies to an attempt the call had already given up on.
    public var staleReplies = 0
    /// Messages from the broker that were not a Sky reply, dropped (only the first is logged).
    public var malformedMessages = 0
    /// Attempts that found no reply within their timeout.
    public var attemptTimeouts = 0
    /// Callers whose call's deadline (`ScanOptions.deadline`) passed before it had an outcome.
    public var deadlinesPassed = 0

    public init() {}
}
