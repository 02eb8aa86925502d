import SkyProtocol
import SkyWire
import Testing

@testable import Sky

@Suite("Retry policy")
struct RetryPolicyTests {
    @Test func backoffGrowsExponentiallyUpToItsCap() {
        let policy = RetryPolicy(
            maxAttempts: 10, initialBackoff: .milliseconds(100), multiplier: 2, maxBackoff: .milliseconds(1000))
        let schedule = (1...6).map { policy.nominalBackoff(afterAttempt: $0) }
        #expect(schedule == [100, 200, 400, 800, 1000, 1000].map { Duration.milliseconds($0) })
    }

    @Test func jitterStaysWithinItsBoundsAndSpreads() {
        let policy = RetryPolicy(initialBackoff: .milliseconds(1000), jitter: 0.2)
        var random = SplitMix64(seed: 7)
        let samples = (0..<2000).map { _ in policy.backoff(afterAttempt: 1, using: &random).wholeMilliseconds }
        #expect(samples.allSatisfy { (800...1200).contains($0) })
        #expect(samples.min()! < 820 && samples.max()! > 1180)
        #expect(Set(samples).count > 300)
    }

    /// `init` checks its arguments, but the properties are `var`s: a value set afterwards must
    /// still give a backoff. NaN multipliers and jitters, a negative multiplier and caps near
    /// `Int64.max` trapped in the middle of a retry (converting a Double out of range).
    @Test func valuesSetAfterInitNeverTrapABackoff() {
        var random = SplitMix64(seed: 3)
        var policy = RetryPolicy(maxAttempts: 100, initialBackoff: .milliseconds(100), maxBackoff: .seconds(Int64.max))
        #expect(policy.nominalBackoff(afterAttempt: 90) == .milliseconds(9_000_000_000_000_000_000))
        #expect(policy.backoff(afterAttempt: 90, using: &random) <= .milliseconds(9_000_000_000_000_000_000))
        policy.maxBackoff = .seconds(5)
        policy.multiplier = .nan
        #expect(policy.nominalBackoff(afterAttempt: 3) == .milliseconds(100), "NaN counts as 1")
        policy.multiplier = -2
        #expect(policy.nominalBackoff(afterAttempt: 3) == .milliseconds(100), "below 1 counts as 1")
        policy.multiplier = .infinity
        #expect(policy.nominalBackoff(afterAttempt: 3) == .seconds(5))
        policy.initialBackoff = .zero
        #expect(policy.nominalBackoff(afterAttempt: 3) == .seconds(5), "0 × ∞ is NaN: the cap")
        policy.initialBackoff = .milliseconds(-100)
        policy.multiplier = 2
        #expect(policy.nominalBackoff(afterAttempt: 1) == .zero)
        policy.initialBackoff = .milliseconds(1000)
        for jitter in [Double.nan, .infinity, -1, 5] {
            policy.jitter = jitter
            let backoff = policy.backoff(afterAttempt: 1, using: &random)
            #expect(backoff >= .zero && backoff <= .seconds(2), "jitter \(jitter)")
        }
    }

    @Test func noJitterMeansTheNominalSchedule() {
        let policy = RetryPolicy(initialBackoff: .milliseconds(250), jitter: 0)
        var random = SplitMix64(seed: 1)
        #expect(policy.backoff(afterAttempt: 3, using: &random) == .milliseconds(1000))
    }

    @Test func byDefaultOnlyTransientErrorsAreRetried() {
        let policy = RetryPolicy.default
        #expect(policy.maxAttempts == 3)
        for error: SkyError in [.timeout("t"), .brokerUnreachable("b")] {
            #expect(policy.shouldRetry(error, afterAttempt: 1))
            #expect(policy.shouldRetry(error, afterAttempt: 2))
            #expect(!policy.shouldRetry(error, afterAttempt: 3), "three attempts in all")
        }
        for error: SkyError in [
            .remote(type: "E", message: "m"), .workerLost("w"), .overloaded("o"), .noWorkers(service: "n"),
            .cancelled("c"),
            .unauthorized("u"),
            .invalidPayload("p"), .unknownService("s"), .clientClosed,
        ] {
            #expect(!policy.shouldRetry(error, afterAttempt: 1), "\(error.code)")
        }
        #expect(policy.retryingHandlerErrors().shouldRetry(.remote(type: "E", message: "m"), afterAttempt: 1))
        #expect(!RetryPolicy.never.shouldRetry(.timeout("t"), afterAttempt: 1))
    }

    @Test func everyReplyStatusMapsToAnErrorThatSaysWhatToDo() {
        for status in ReplyStatus.allCases where status != .ok {
            let reply = TaskReply.failure(RequestID(high: 1, low: 2), status, type: "T", message: "because")
            let error = SkyError(failure: reply, service: "s")
            // noWorkers names the service rather than repeating the broker's sentence; keptAsJob
            // names the job (the request's id) and where to read it.
            let says = status == .noWorkers ? "serves s," : status == .keptAsJob ? "read its outcome" : "because"
            #expect(error.description.contains(says), "\(status)")
            #expect(error.description.count > "because".count + 20, "\(status): \(error)")
        }
        // A broker service's refusal is the caller's arguments, not a worker's disagreement.
        let refused = SkyError(
            failure: .failure(RequestID(high: 1, low: 2), .invalidPayload, type: "t", message: "no such name"),
            service: "mmi.schedules.pause")
        #expect(refused == .invalidTask("no such name") && !refused.description.contains("worker"), "\(refused)")
        let lost = SkyError(
            failure: .failure(RequestID(high: 1, low: 2), .brokerShuttingDown, type: "b", message: "m"), service: "s")
        #expect(lost.code == .brokerUnreachable)
        let remote = SkyError(
            failure: .failure(
                RequestID(high: 1, low: 2), .handlerError, type: "MyApp.RateLimited", message: "slow down"),
            service: "s")
        #expect(remote == .remote(type: "MyApp.RateLimited", message: "slow down"))
    }

    /// A library's initialiser takes any value a caller can pass: `RetryPolicy(maxAttempts: 0)`
    /// ended the calling process (a precondition). Out-of-range values are clamped.
    @Test func initClampsWhatItOnceTrappedOn() {
        let policy = RetryPolicy(
            maxAttempts: 0, initialBackoff: .seconds(-1), multiplier: 0.5, maxBackoff: .seconds(-2), jitter: 7)
        #expect(
            policy.maxAttempts == 1
                && policy
                    == RetryPolicy(maxAttempts: 1, initialBackoff: .zero, multiplier: 1, maxBackoff: .zero, jitter: 1)
        )
        #expect(!policy.shouldRetry(.timeout("t"), afterAttempt: 1), "one attempt, no retry")
        #expect(RetryPolicy(maxAttempts: -5, multiplier: .nan, jitter: .nan).multiplier == 1)
        #expect(RetryPolicy(maxAttempts: .min, jitter: -.infinity).jitter == 0)
        #expect(RetryPolicy(maxAttempts: .max).maxAttempts == .max)
    }
}
