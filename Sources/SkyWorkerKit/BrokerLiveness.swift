import SkyProtocol

/// The worker's view of whether its broker is alive, and when to reconnect. A value type: every
/// input carries `now`, so tests move time by hand.
///
/// Any message from the broker proves it alive. Silence for `liveness × interval` means the
/// broker is lost (``Action/lost(reconnectAt:)``): the worker keeps its connection and keeps
/// heartbeating on it, because a broker that comes back answers with DISCONNECT and the worker
/// registers at once; if nothing comes, ``tick(now:)`` says `.connect` after a backoff that
/// starts at ``Configuration/initialBackoff``, doubles up to ``Configuration/maxBackoff``, and is
/// spread by ±``Configuration/jitter`` so that a fleet of workers does not reconnect in
/// lockstep. A message from the broker resets the backoff. A DISCONNECT from the broker (it does
/// not know this worker) means: register again now. ``WorkerStateMachine`` owns one.
public struct BrokerLiveness: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public struct Configuration: Sendable {
        public var heartbeatInterval: Duration = WorkerToBroker.defaultHeartbeatInterval
        public var liveness: Int = WorkerToBroker.defaultLiveness
        public var initialBackoff: Duration = .seconds(1)
        public var maxBackoff: Duration = .seconds(32)
        /// Fraction of the backoff by which it is randomly shortened or lengthened.
        public var jitter: Double = 0.2

        public init() {}

        public var expiry: Duration { heartbeatInterval * liveness }

        /// This configuration within what a worker runs on, so that no value a caller sets traps
        /// (a product or sum past `Duration`'s range, a NaN jitter) or spins: the heartbeat
        /// interval within 10 ms...1 h and liveness within 1...1,000 (skyworker's flag ranges),
        /// backoffs within 0...`Duration.longestSleep`, jitter within 0...1 (NaN is 0).
        /// ``BrokerLiveness`` and ``SkyWorker`` apply it: they clamp rather than trap.
        public var clamped: Configuration {
            var clamped = self
            clamped.heartbeatInterval = min(max(heartbeatInterval, .milliseconds(10)), .seconds(3600))
            clamped.liveness = min(max(liveness, 1), 1000)
            clamped.initialBackoff = initialBackoff.asSleep
            clamped.maxBackoff = maxBackoff.asSleep
            clamped.jitter = jitter > 0 ? min(jitter, 1) : 0
            return clamped
        }
    }

    public enum Action: Sendable, Equatable {
        /// The broker fell silent: expect nothing from it; ``tick(now:)`` says `.connect` once
        /// `reconnectAt` has passed, unless the broker speaks first.
        case lost(reconnectAt: Instant)
        /// Open a new connection (closing the old one) and register.
        case connect
    }

    public enum State: Sendable, Equatable {
        case connected(lastHeard: Instant)
        case waiting(until: Instant)
    }

    public let configuration: Configuration
    public private(set) var state: State
    public private(set) var backoff: Duration
    private var random: UInt64

    public init(configuration: Configuration = Configuration(), now: Instant, seed: UInt64 = .random(in: 1...(.max))) {
        self.configuration = configuration.clamped
        state = .connected(lastHeard: now)
        backoff = self.configuration.initialBackoff
        random = seed | 1
    }

    /// A message arrived from the broker on the current connection.
    public mutating func heard(now: Instant) {
        state = .connected(lastHeard: now)
        backoff = configuration.initialBackoff
    }

    /// Time passed.
    public mutating func tick(now: Instant) -> Action? {
        switch state {
        case .connected(let lastHeard):
            guard now - lastHeard >= configuration.expiry else { return nil }
            let until = now + jittered(backoff)
            backoff = min(backoff * 2, configuration.maxBackoff)
            state = .waiting(until: until)
            return .lost(reconnectAt: until)
        case .waiting(let until):
            guard now >= until else { return nil }
            state = .connected(lastHeard: now)
            return .connect
        }
    }

    /// A connection could not even be opened: try again after the backoff.
    public mutating func lostNow(now: Instant) {
        state = .waiting(until: now + jittered(backoff))
        backoff = min(backoff * 2, configuration.maxBackoff)
    }

    /// The broker said DISCONNECT: it does not know this connection.
    public mutating func brokerDisconnected(now: Instant) -> Action {
        state = .connected(lastHeard: now)
        return .connect
    }

    private mutating func jittered(_ duration: Duration) -> Duration {
        // xorshift64: cheap, deterministic for a given seed.
        random ^= random << 13
        random ^= random >> 7
        random ^= random << 17
        let unit = Double(random >> 11) / Double(1 << 53)  // 0..<1
        let factor = 1 + configuration.jitter * (2 * unit - 1)
        return duration * factor
    }
}
