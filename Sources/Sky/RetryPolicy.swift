import Foundation
import SkyWire

/// When and how often a call is tried again.
///
/// After a failed attempt whose error's code is in ``retryOn``, the client waits a backoff and
/// tries again with the same request id and a raised attempt number, up to ``maxAttempts``
/// attempts in all. The backoff after attempt *n* is `initialBackoff × multiplier^(n-1)`, capped at
/// ``maxBackoff``, then spread by ±``jitter`` so that many clients failing together do not retry
/// in lockstep; it is rounded to whole milliseconds.
///
/// Remote handler errors are not retried by default (the same input usually fails the same
/// way); ``retryingHandlerErrors()`` adds them for handlers with transient failures. Nor is
/// ``SkyError/workerLost(_:)``: the broker answers it only after it handed the task to
/// `--max-deliveries` workers that were all lost, so a retry would hand a task that kills its
/// workers to as many again.
public struct RetryPolicy: Sendable, Equatable {
    /// Attempts in all, the first included; 1 means no retry.
    public var maxAttempts: Int
    public var initialBackoff: Duration
    public var multiplier: Double
    public var maxBackoff: Duration
    /// How far each backoff may stray from its nominal value, as a fraction (0.2 = ±20 %).
    public var jitter: Double
    /// The errors worth another attempt.
    public var retryOn: Set<SkyError.Code>

    /// Takes any values, clamping those out of range instead of trapping (a library must not
    /// end its caller's process for a value it can pass): `maxAttempts` below 1 is 1 (one
    /// attempt, no retry), `multiplier` below 1 or NaN is 1, `jitter` is kept within 0...1 (NaN
    /// is 0), and negative backoffs are zero. The properties hold the clamped values.
    public init(
        maxAttempts: Int = 3, initialBackoff: Duration = .milliseconds(100), multiplier: Double = 2,
        maxBackoff: Duration = .seconds(5), jitter: Double = 0.2,
        retryOn: Set<SkyError.Code> = [.timeout, .brokerUnreachable]
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialBackoff = max(.zero, initialBackoff)
        self.multiplier = multiplier >= 1 ? multiplier : 1
        self.maxBackoff = max(.zero, maxBackoff)
        self.jitter = jitter > 0 ? min(jitter, 1) : 0
        self.retryOn = retryOn
    }

    /// Three attempts, backoff 100 ms doubling to 5 s, ±20 %; retries timeouts and an
    /// unreachable broker.
    public static let `default` = RetryPolicy()

    /// One attempt only.
    public static let never = RetryPolicy(maxAttempts: 1)

    /// This policy, also retrying errors thrown by the task's handler.
    public func retryingHandlerErrors() -> RetryPolicy {
        var policy = self
        policy.retryOn.insert(.remote)
        return policy
    }

    /// Whether a call whose attempt number `attempt` failed with `error` gets another attempt.
    public func shouldRetry(_ error: SkyError, afterAttempt attempt: Int) -> Bool {
        attempt < maxAttempts && retryOn.contains(error.code)
    }

    /// The backoff after attempt `attempt` (1 for the first), before jitter.
    public func nominalBackoff(afterAttempt attempt: Int) -> Duration {
        let base = Double(max(0, initialBackoff.wholeMilliseconds))
        let cap = Double(max(0, maxBackoff.wholeMilliseconds))
        let grown = base * pow(usedMultiplier, Double(max(0, attempt - 1)))
        // `grown < cap` is false for NaN (0 × ∞), which then takes the cap.
        return Self.milliseconds(grown < cap ? grown : cap)
    }

    /// The backoff after attempt `attempt`, with jitter drawn from `random`.
    public func backoff(afterAttempt attempt: Int, using random: inout some RandomNumberGenerator) -> Duration {
        let nominal = Double(nominalBackoff(afterAttempt: attempt).wholeMilliseconds)
        let spread = usedJitter
        let factor = spread > 0 ? Double.random(in: (1 - spread)...(1 + spread), using: &random) : 1
        return Self.milliseconds(nominal * factor)
    }

    // The properties are `var`s, so `init`'s clamping does not hold for values set later: a policy
    // whose multiplier became NaN or whose jitter became 5 still gives a backoff, never a trap
    // in the middle of a retry.

    /// ``multiplier`` as applied: at least 1 (below 1 or NaN counts as 1).
    var usedMultiplier: Double { multiplier >= 1 ? multiplier : 1 }

    /// ``jitter`` as applied: within 0...1 (NaN counts as 0).
    var usedJitter: Double { jitter > 0 ? min(jitter, 1) : 0 }

    /// ``maxAttempts`` as applied: at least 1.
    var usedMaxAttempts: Int { max(1, maxAttempts) }

    /// Whole milliseconds, rounded, within 0 and 9 × 10¹⁸ (about 285 million years), so that a
    /// backoff grown past `Int64` saturates instead of trapping.
    private static func milliseconds(_ value: Double) -> Duration {
        .milliseconds(Int64(min(9.0e18, max(0, value)).rounded()))
    }
}
