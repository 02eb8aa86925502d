import Foundation
import SkyProtocol
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

    @Test func anIdempotencyKeyOver255BytesIsRefusedTyped() {
        #expect(throws: SkyError.self) {
            _ = try JobOptions().submission(service: "sky.echo", body: [], key: String(repeating: "k", count: 256))
        }
    }
}
