import Foundation
import Testing

@testable import SkyProtocol

@Suite("Job codecs: ids, submissions, reports, listings")
struct JobCodecTests {
    /// A job's times, milliseconds since 1970 on the wire, read as `Date`s; absent stays absent.
    @Test func aJobsTimesReadAsDates() {
        var details = JobDetails(id: "j", state: "succeeded")
        details.submittedAt = 1_764_547_200_250
        details.endedAt = 1_764_547_201_000
        #expect(details.submissionDate == Date(timeIntervalSince1970: 1_764_547_200.25))
        #expect(details.endDate?.timeIntervalSince(details.submissionDate!) == 0.75)
        #expect(details.startDate == nil)
        #expect(details.earliestStartDate == nil && details.expirationDate == nil && details.progressDate == nil)
    }

    @Test func aJobIDPrintsAs26CrockfordCharactersAndParsesBack() throws {
        var random = SplitMix64(seed: 7)
        let id = JobID(milliseconds: 1_700_000_000_123, random: &random)
        let text = id.description
        #expect(text.count == 26 && text.allSatisfy { "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains($0) })
        #expect(JobID(text) == id)
        #expect(JobID(text.lowercased()) == id, "case-insensitive")
        #expect(id.milliseconds == 1_700_000_000_123)
        #expect(JobID(bytes: id.bytes) == id && id.bytes.count == 16)
        #expect(JobID(id.requestID) == id)
        // Crockford's look-alikes read as digits; what is not base32 is refused.
        let zeros = JobID("00000000000000000000000001")
        #expect(JobID("OOOOOOOOOOOOOOOOOOOOOOOOOI") == zeros)
        #expect(JobID("0000000000000000000000000U") == nil)
        #expect(JobID("80000000000000000000000000") == nil, "over 128 bits")
        #expect(JobID("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")?.bytes == [UInt8](repeating: 255, count: 16))
        #expect(JobID("short") == nil && JobID(bytes: [1, 2]) == nil)
        // Later submits sort later.
        let later = JobID(milliseconds: 1_700_000_000_124, random: &random)
        #expect(later.description > id.description)
    }

    @Test func aSubmissionRoundTripsAndEveryTruncationIsATypedError() throws {
        var submission = JobSubmission(service: "images.resize", body: Array("{\"url\":\"x\"}".utf8))
        submission.priority = -5
        submission.notBeforeMilliseconds = 1_700_000_000_000
        submission.delayMilliseconds = 3000
        submission.idempotencyKey = "order-7"
        submission.retryOn = [.handlerError, .deadlineExceeded]
        let bytes = submission.encode()
        #expect(try JobSubmission(decoding: bytes) == submission)
        let bodyStart = bytes.count - submission.body.count
        for length in 0..<bodyStart {
            #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: Array(bytes.prefix(length))) }
        }
        var wrongVersion = bytes
        wrongVersion[0] = 5
        #expect(throws: ProtocolError.invalidValue(name: "job version", reason: "5; this broker reads 1 to 4")) {
            _ = try JobSubmission(decoding: wrongVersion)
        }
    }

    /// A submission with a confirmation bound is version 2: version 1 with the bound after the
    /// version byte. Without one it stays version 1, which every broker reads.
    @Test func aConfirmationBoundMakesTheSubmissionVersionTwo() throws {
        var submission = JobSubmission(service: "images.resize", body: [1, 2, 3])
        submission.idempotencyKey = "order-7"
        let first = submission.encode()
        #expect(first[0] == 1)
        submission.confirmWithinMilliseconds = 850
        let second = submission.encode()
        #expect(second[0] == 2 && Array(second[1..<5]) == [0, 0, 3, 82])
        #expect(Array(second[5...]) == Array(first[1...]), "the rest is version 1's layout")
        #expect(try JobSubmission(decoding: second) == submission)
        for length in 0..<5 {
            #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: Array(second.prefix(length))) }
        }
    }

    /// A unique job's key hold makes the submission version 3: version 2 with the hold after
    /// the bound. A hold without a key, an unknown hold and a key too long for the broker's
    /// prefix are refused by name.
    @Test func aKeyHoldMakesTheSubmissionVersionThree() throws {
        var submission = JobSubmission(service: "images.resize", body: [1, 2, 3])
        submission.idempotencyKey = "order-7"
        let first = submission.encode()
        submission.keyHold = .whileRunning
        let third = submission.encode()
        #expect(third[0] == 3 && Array(third[1..<6]) == [0, 0, 0, 0, 2])
        #expect(Array(third[6...]) == Array(first[1...]), "the rest is version 1's layout")
        #expect(try JobSubmission(decoding: third) == submission)
        #expect(submission.recordedKey == "sky.unique/r/order-7")
        for length in 0..<6 {
            #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: Array(third.prefix(length))) }
        }
        var unknown = third
        unknown[5] = 9
        #expect(
            throws: ProtocolError.invalidValue(
                name: "key hold", reason: "9; 0 kept, 1 while queued, 2 while running, 3 for a time")
        ) {
            _ = try JobSubmission(decoding: unknown)
        }
        var keyless = submission
        keyless.idempotencyKey = nil
        #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: keyless.encode()) }
        var long = submission
        long.idempotencyKey = String(repeating: "k", count: JobSubmission.maxUniqueKeyLength + 1)
        #expect(JobSubmission.maxUniqueKeyLength == 242)
        #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: long.encode()) }
        // Held for a time: the time (u64) after the hold byte, a second to 366 days.
        var timed = submission
        timed.keyHold = .forTime
        timed.keyHoldMilliseconds = 600_000
        let encoded = timed.encode()
        #expect(Array(encoded[5..<14]) == [3, 0, 0, 0, 0, 0, 9, 39, 192])
        #expect(try JobSubmission(decoding: encoded) == timed)
        #expect(timed.recordedKey == "sky.unique/t/order-7")
        timed.keyHoldMilliseconds = 999
        #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: timed.encode()) }
    }

    /// A concurrency key makes the submission version 4: version 3 with the limit (u32) and
    /// the key after the hold. A limit without a key, a limit over 1,000,000 and a key that is
    /// not a name are refused by name; every truncation is a typed error.
    @Test func aConcurrencyKeyMakesTheSubmissionVersionFour() throws {
        var submission = JobSubmission(service: "images.resize", body: [1, 2, 3])
        let first = submission.encode()
        submission.concurrencyKey = "customer-42"
        submission.concurrencyLimit = 2
        let fourth = submission.encode()
        #expect(Array(fourth[0..<10]) == [4, 0, 0, 0, 0, 0, 0, 0, 0, 2])
        #expect(fourth[10] == 11 && Array(fourth[11..<22]) == Array("customer-42".utf8))
        #expect(Array(fourth[22...]) == Array(first[1...]), "the rest is version 1's layout")
        #expect(try JobSubmission(decoding: fourth) == submission)
        for length in 0..<22 {
            #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: Array(fourth.prefix(length))) }
        }
        // With a key hold, the hold's fields come first.
        var both = submission
        both.idempotencyKey = "order-7"
        both.keyHold = .forTime
        both.keyHoldMilliseconds = 600_000
        #expect(try JobSubmission(decoding: both.encode()) == both)
        var keyless = fourth
        keyless.replaceSubrange(10..<22, with: [0])
        #expect(
            throws: ProtocolError.invalidValue(
                name: "concurrency limit", reason: "2 without a concurrency key; a limit needs one")
        ) { _ = try JobSubmission(decoding: keyless) }
        var huge = fourth
        huge.replaceSubrange(6..<10, with: [0x00, 0x0F, 0x42, 0x41])
        #expect(
            throws: ProtocolError.invalidValue(name: "concurrency limit", reason: "1000001; at most 1000000")
        ) { _ = try JobSubmission(decoding: huge) }
        var control = fourth
        control[11] = 0x07
        #expect(throws: ProtocolError.self) { _ = try JobSubmission(decoding: control) }
        // A key without a limit: turns only.
        submission.concurrencyLimit = 0
        #expect(try JobSubmission(decoding: submission.encode()) == submission)
    }

    @Test func reportsQueriesAndListingsRoundTrip() throws {
        let report = JobReport(
            state: .failed, attempt: 3, outcomeStatus: .handlerError, worker: "w1", service: "sky.flaky",
            outcome: RemoteErrorBody(type: "Boom", message: "no").encoded())
        #expect(try JobReport(decoding: report.encode()) == report)
        #expect(throws: ProtocolError.self) { _ = try JobReport(decoding: [9]) }
        let query = JobQuery(state: .failed, service: "sky.flaky", limit: 5000)
        let decoded = try JobQuery(decoding: query.encode())
        #expect(decoded.state == .failed && decoded.service == "sky.flaky" && decoded.limit == JobQuery.maxLimit)
        #expect(try JobQuery(decoding: JobQuery().encode()) == JobQuery())
        var random = SplitMix64(seed: 1)
        let listing = JobListing(jobs: [
            (JobID(milliseconds: 1, random: &random), report),
            (JobID(milliseconds: 2, random: &random), JobReport(state: .queued)),
        ])
        #expect(try JobListing(decoding: listing.encode()) == listing)
        #expect(try JobListing(decoding: listing.encode()).matched == nil, "an older broker's: no count")
        let counted = JobListing(jobs: listing.jobs, matched: 1234)
        #expect(try JobListing(decoding: counted.encode()).matched == 1234)
        // An older reader stops after the jobs: the count does not disturb them.
        #expect(counted.encode().count == listing.encode().count + 4)
        #expect(JobState(name: "scheduled") == .scheduled && JobState(name: "nope") == nil)
    }
}
