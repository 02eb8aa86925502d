import SkyProtocol
import SkyWire

/// How a worker watches its broker: heartbeats, how many missed ones mean the broker is gone,
/// and how long it waits before connecting again (``SkyWorker/Configuration/liveness``;
/// `skyworker --heartbeat-interval` and `--liveness` set the first two).
public struct LivenessOptions: Sendable {
    public var heartbeatInterval: Duration = WorkerToBroker.defaultHeartbeatInterval
    public var liveness: Int = WorkerToBroker.defaultLiveness
    public var initialBackoff: Duration = .seconds(1)
    public var maxBackoff: Duration = .seconds(32)
    /// Fraction of the backoff by which it is randomly shortened or lengthened.
    public var jitter: Double = 0.2

    public init() {}

    package var expiry: Duration { heartbeatInterval * liveness }

    /// This configuration within what a worker runs on, so that no value a caller sets traps
    /// (a product or sum past `Duration`'s range, a NaN jitter) or spins: the heartbeat
    /// interval within 10 ms...1 h and liveness within 1...1,000 (skyworker's flag ranges),
    /// backoffs within 0...`Duration.longestSleep`, jitter within 0...1 (NaN is 0).
    /// ``BrokerLiveness`` and ``SkyWorker`` apply it: they clamp rather than trap.
    package var clamped: LivenessOptions {
        var clamped = self
        clamped.heartbeatInterval = min(max(heartbeatInterval, .milliseconds(10)), .seconds(3600))
        clamped.liveness = min(max(liveness, 1), 1000)
        clamped.initialBackoff = initialBackoff.asSleep
        clamped.maxBackoff = maxBackoff.asSleep
        clamped.jitter = jitter > 0 ? min(jitter, 1) : 0
        return clamped
    }
}
