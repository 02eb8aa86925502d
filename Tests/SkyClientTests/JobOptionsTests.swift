import Foundation
import SkyProtocol
import SkyWire
import Testing

@testable import Sky

@Suite("JobOptions: absurd values never trap")
struct JobOptionsTests {
    @Test func absurdOptionsEncodeClampedInsteadOfTrapping() throws {
        let options = JobOptions(
            delay: .seconds(Int64.max), notBefore: Date(timeIntervalSince1970: 1e20), idempotencyKey: "k",
            retry: RetryPolicy(maxAttempts: 1_000_000, multiplier: 1e300, maxBackoff: .seconds(Int64.max)),
            retention: .seconds(Int64.max), timeout: .seconds(Int64.max))
        let submission = try options.submission(service: "sky.echo", body: [1], key: "k")
        #expect(submission.maxAttempts == UInt16.max && submission.multiplierPercent == UInt16.max)
        #expect(submission.delayMilliseconds == UInt64(Int64.max) && submission.notBeforeMilliseconds > 0)
        #expect(try JobSubmission(decoding: submission.encode()) == submission)
        #expect(Duration.seconds(Int64.max).wholeMilliseconds == Int64.max)
        #expect(Duration.seconds(Int64.min).wholeMilliseconds == Int64.min)
    }

    /// Times that mean nothing are refused, with what to give instead: they were clamped (a
    /// timeout of zero ran each attempt for 1 ms, a retention of zero forgot the outcome as it
    /// was written, a confirm-within of zero reported a journal that worked as failing).
    @Test func timesThatMeanNothingAreRefused() {
        let cases: [(JobOptions, String)] = [
            (JobOptions(timeout: .zero), "JobOptions.timeout"),
            (JobOptions(timeout: .seconds(-3)), "JobOptions.timeout"),
            (JobOptions(retention: .zero), "JobOptions.retention"),
            (JobOptions(retention: .milliseconds(999)), "JobOptions.retention"),
            (JobOptions(delay: .seconds(-1)), "JobOptions.delay"),
            (JobOptions(confirmWithin: .zero), "JobOptions.confirmWithin"),
        ]
        for (options, named) in cases {
            #expect {
                _ = try options.submission(service: "sky.echo", body: [1], key: "k")
            } throws: { error in
                guard case SkyError.invalidTask(let text) = error else { return false }
                return text.contains(named)
                    && (text.contains("positive") || text.contains("at least") || text.contains("zero or more"))
            }
        }
        #expect(throws: Never.self) {
            _ = try JobOptions(delay: .zero, retention: .seconds(1), timeout: .milliseconds(1), confirmWithin: nil)
                .submission(service: "sky.echo", body: [1], key: "k")
        }
    }

    /// Durations beyond `Int64.max` seconds (an instant plus `.seconds(Int64.max)`, measured from
    /// an earlier one) saturate: reading their `components` trapped.
    @Test func durationsBeyondInt64SecondsSaturate() {
        let beyond = Duration.seconds(Int64.max) + .seconds(Int64.max)
        #expect(beyond.wholeNanoseconds == .max && beyond.wholeMilliseconds == .max)
        #expect((.zero - beyond).wholeNanoseconds == .min && (.zero - beyond).wholeMilliseconds == .min)
        #expect(beyond.inSeconds == .infinity && (.zero - beyond).inSeconds == -.infinity)
        #expect(Duration.milliseconds(-1500).wholeMilliseconds == -1500)
        #expect((Duration.seconds(2) + .nanoseconds(7)).wholeNanoseconds == 2_000_000_007)
        #expect(Duration.milliseconds(1500).inSeconds == 1.5)
    }

    /// A concurrency key and limit reach the submission (version 4); a limit without a key, a
    /// limit out of range and a key that is not a name are refused before anything is sent.
    @Test func aConcurrencyKeyAndLimitAreSentAndBadOnesRefused() throws {
        let submission = try JobOptions(concurrencyKey: "customer-42", concurrencyLimit: 2)
            .submission(service: "sky.echo", body: [1], key: "k")
        #expect(submission.concurrencyKey == "customer-42" && submission.concurrencyLimit == 2)
        #expect(submission.encode().first == 4)
        #expect(try JobSubmission(decoding: submission.encode()) == submission)
        let turnsOnly = try JobOptions(concurrencyKey: "customer-7").submission(service: "sky.echo", body: [], key: "k")
        #expect(turnsOnly.concurrencyLimit == 0)
        for (options, says) in [
            (JobOptions(concurrencyLimit: 1), "needs its key"),
            (JobOptions(concurrencyKey: "c", concurrencyLimit: 0), "1...1000000"),
            (JobOptions(concurrencyKey: "c", concurrencyLimit: 1_000_001), "1...1000000"),
            (JobOptions(concurrencyKey: "a\u{7}b"), "concurrency key"),
            (JobOptions(concurrencyKey: ""), "concurrency key"),
        ] {
            #expect {
                _ = try options.submission(service: "sky.echo", body: [], key: "k")
            } throws: { error in
                guard case SkyError.invalidTask(let message) = error else { return false }
                return message.contains(says)
            }
        }
    }

    /// A call's key and limit are checked as a job's are, before anything is sent.
    @Test func aCallsConcurrencyKeyAndLimitAreChecked() {
        #expect(ScanOptions(concurrencyKey: "customer-42", concurrencyLimit: 1).concurrencyProblem == nil)
        #expect(ScanOptions(concurrencyKey: "customer-42").concurrencyProblem == nil)
        #expect(ScanOptions(concurrencyLimit: 1).concurrencyProblem?.contains("needs its key") == true)
        #expect(
            ScanOptions(concurrencyKey: "c", concurrencyLimit: 0).concurrencyProblem?.contains("1...1000000") == true)
        #expect(ScanOptions(concurrencyKey: "").concurrencyProblem?.contains("concurrency key") == true)
    }

    /// A policy's `var`s set below `init`'s bounds: a negative multiplier trapped the submit
    /// (`UInt16(-100.0)`), and no attempts at all was sent for the broker to refuse.
    @Test func aPolicyChangedBelowItsBoundsIsSentWithinThem() throws {
        var retry = RetryPolicy()
        retry.multiplier = -1
        retry.maxAttempts = 0
        var options = JobOptions(retry: retry)
        var submission = try options.submission(service: "sky.echo", body: [1], key: "k")
        #expect(submission.multiplierPercent == 100 && submission.maxAttempts == 1)
        #expect(try JobSubmission(decoding: submission.encode()) == submission)
        options.retry.multiplier = .nan
        submission = try options.submission(service: "sky.echo", body: [1], key: "k")
        #expect(submission.multiplierPercent == 100)
    }

    /// A submit without a key of the user's gets one of the client's: unique, and increasing
    /// within a client, so that the journal's key index grows at one end (random keys wrote a
    /// different index page for every job: twice the journal's page writes, measured).
    @Test func theKeysACallMakesAreUniqueAndIncreasingWithinAClient() async throws {
        let first = try await SkyClient(broker: "tcp://127.0.0.1:1")
        let second = try await SkyClient(broker: "tcp://127.0.0.1:1")
        let keys = (0..<300).map { _ in first.shell.callKey() }
        #expect(Set(keys).count == keys.count)
        let outOfOrder = zip(keys, keys.dropFirst()).filter { !$0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(
            outOfOrder.isEmpty,
            "byte order is call order; first out of order: \(outOfOrder.first.map { "\($0)" } ?? "")")
        #expect(keys.allSatisfy { $0.hasPrefix("call:") && $0.utf8.count <= 255 })
        #expect(!keys.contains(second.shell.callKey()), "another client's keys differ")
        await first.close()
        await second.close()
    }

    @Test func anIdempotencyKeyOver255BytesIsRefusedTyped() {
        #expect(throws: SkyError.self) {
            _ = try JobOptions().submission(service: "sky.echo", body: [], key: String(repeating: "k", count: 256))
        }
    }
}

/// The numbers docs/jobs.md ("Options", "On the wire") states, so that the doc cannot drift
/// from the code unnoticed: a third party writing a client from the docs sends these values.
@Suite("JobOptions: the wire values docs/jobs.md states")
struct JobOptionsDocumentedValuesTests {
    /// `RetryPolicy.default` in a job submission: 3 attempts, 100 ms doubling (multiplier × 100
    /// = 200) to 5,000 ms, retried after status 7 (deadlineExceeded) only; jitter is not sent,
    /// and `brokerUnreachable` has no status. `.retryingHandlerErrors()` adds status 1.
    @Test func theDefaultRetryPolicyOnTheWire() throws {
        let submission = try JobOptions().submission(service: "s", body: [], key: "k")
        #expect(submission.maxAttempts == 3)
        #expect(submission.initialBackoffMilliseconds == 100 && submission.maxBackoffMilliseconds == 5000)
        #expect(submission.multiplierPercent == 200)
        #expect(submission.retryOn == [.deadlineExceeded])
        let handlerErrors = try JobOptions(retry: RetryPolicy.default.retryingHandlerErrors())
            .submission(service: "s", body: [], key: "k")
        #expect(handlerErrors.retryOn == [.handlerError, .deadlineExceeded])
        #expect(RetryPolicy.never.maxAttempts == 1)
    }

    /// The priorities by name: -50, 0, 50, 100 (an `Int8` on the wire; any other value works).
    @Test func thePrioritiesByName() {
        #expect(
            [JobPriority.low, .normal, .high, .urgent].map(\.rawValue) == [-50, 0, 50, 100])
    }

    /// `mmi.jobs.wait` is held at most 20 s; Sky's client gives its job calls that plus 10 s.
    @Test func theWaitHold() {
        #expect(BrokerService.jobWaitHold == .seconds(20))
    }
}
