import SkyProtocol
import SkyWire

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
package struct BrokerLiveness: Sendable {
    package typealias Instant = MonotonicInstant

    /// What the machine is told at its start: ``LivenessOptions``.
    package typealias Configuration = LivenessOptions

    package enum Action: Sendable, Equatable {
        /// The broker fell silent: expect nothing from it; ``tick(now:)`` says `.connect` once
        /// `reconnectAt` has passed, unless the broker speaks first.
        case lost(reconnectAt: Instant)
        /// Open a new connection (closing the old one) and register.
        case connect
    }

    package enum State: Sendable, Equatable {
        case connected(lastHeard: Instant)
        case waiting(until: Instant)
    }

    package private(set) var configuration: Configuration
    package private(set) var state: State
    package private(set) var backoff: Duration
    private var random: UInt64

    package init(configuration: Configuration = Configuration(), now: Instant, seed: UInt64 = .random(in: 1...(.max))) {
        self.configuration = configuration.clamped
        state = .connected(lastHeard: now)
        backoff = self.configuration.initialBackoff
        random = seed | 1
    }

    /// The broker heartbeats every `interval` (its FEATURES said so): its silence is judged by
    /// its interval from now on.
    package mutating func adopt(heartbeatInterval interval: Duration) {
        var adopted = configuration
        adopted.heartbeatInterval = interval
        configuration = adopted.clamped
    }

    /// A message arrived from the broker on the current connection.
    package mutating func heard(now: Instant) {
        state = .connected(lastHeard: now)
        backoff = configuration.initialBackoff
    }

    /// Time passed.
    package mutating func tick(now: Instant) -> Action? {
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
    package mutating func lostNow(now: Instant) {
        state = .waiting(until: now + jittered(backoff))
        backoff = min(backoff * 2, configuration.maxBackoff)
    }

    /// The broker said DISCONNECT: it does not know this connection.
    package mutating func brokerDisconnected(now: Instant) -> Action {
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
