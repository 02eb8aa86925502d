import Foundation

/// When and how often a call is tried again.
///
/// After a failed attempt whose error's code is in ``retryOn``, the client waits a backoff and
/// tries again with the same request id and a raised attempt number, up to ``maxAttempts``
/// attempts in all. The backoff after attempt *n* is `initialBackoff × multiplier^(n-1)`, capped at
/// ``maxBackoff``, then spread by ±``jitter`` so that many clients failing together do not retry
/// in lockstep; it is rounded to whole milliseconds.
///
/// Remote handler errors are not retried by default (the same input usually fails the same
/// way); ``retryingHandlerErrors()`` adds them for handlers with transient failures.
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

    public init(
        maxAttempts: Int = 3, initialBackoff: Duration = .milliseconds(100), multiplier: Double = 2,
        maxBackoff: Duration = .seconds(5), jitter: Double = 0.2,
        retryOn: Set<SkyError.Code> = [.timeout, .workerLost, .brokerUnreachable]
    ) {
        precondition(maxAttempts >= 1, "maxAttempts must be at least 1")
        precondition((0...1).contains(jitter), "jitter must be in 0...1")
        precondition(multiplier >= 1, "multiplier must be at least 1")
        self.maxAttempts = maxAttempts
        self.initialBackoff = initialBackoff
        self.multiplier = multiplier
        self.maxBackoff = maxBackoff
        self.jitter = jitter
        self.retryOn = retryOn
    }

    /// Three attempts, backoff 100 ms doubling to 5 s, ±20 %; retries timeouts, lost workers and
    /// an unreachable broker.
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
        let base = Double(initialBackoff.wholeMilliseconds)
        let grown = base * pow(multiplier, Double(max(0, attempt - 1)))
        return .milliseconds(Int64(min(grown, Double(maxBackoff.wholeMilliseconds)).rounded()))
    }

    /// The backoff after attempt `attempt`, with jitter drawn from `random`.
    public func backoff(afterAttempt attempt: Int, using random: inout some RandomNumberGenerator) -> Duration {
        let nominal = Double(nominalBackoff(afterAttempt: attempt).wholeMilliseconds)
        let factor = jitter > 0 ? Double.random(in: (1 - jitter)...(1 + jitter), using: &random) : 1
        return .milliseconds(Int64((nominal * factor).rounded()))
    }
}
