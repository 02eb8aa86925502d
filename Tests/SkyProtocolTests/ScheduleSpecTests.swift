import Foundation
import Testing

@testable import SkyProtocol

@Suite("Schedules: the wire form, its checks and the next tick")
struct ScheduleSpecTests {
    static func job() -> JobSubmission {
        var job = JobSubmission(service: "reports.nightly", body: Array("{}".utf8))
        job.maxAttempts = 5
        return job
    }

    @Test func bothTimingsRoundTripWithEveryPolicy() throws {
        var interval = ScheduleSpec(name: "heartbeat", timing: .every(milliseconds: 30_000), job: Self.job())
        interval.overlap = .allow
        interval.catchUp = .all(limit: 20)
        interval.paused = true
        #expect(try ScheduleSpec(decoding: interval.encode()) == interval)
        var cron = ScheduleSpec(
            name: "nightly report", timing: .cron(try CronExpression("30 2 * * MON-FRI"), timeZone: "Europe/Berlin"),
            job: Self.job())
        cron.overlap = .cancelPrevious
        cron.catchUp = .none
        #expect(try ScheduleSpec(decoding: cron.encode()) == cron)
        let defaults = ScheduleSpec(name: "d", timing: .every(milliseconds: 1000), job: Self.job())
        #expect(defaults.overlap == .skip && defaults.catchUp == .last && !defaults.paused)
    }

    /// Every truncation is a typed error, never a trap.
    @Test func everyTruncationIsATypedError() throws {
        let cron = ScheduleSpec(
            name: "n", timing: .cron(try CronExpression("@hourly"), timeZone: "UTC"), job: Self.job())
        let bytes = cron.encode()
        let jobStart = bytes.count - Self.job().encode().count
        for length in 0..<jobStart + 2 {
            #expect(throws: ProtocolError.self) { _ = try ScheduleSpec(decoding: Array(bytes.prefix(length))) }
        }
    }

    /// The mistakes the issue names, each refused naming the problem, on the client's side
    /// (``ScheduleSpec/problem``) and the broker's (decoding) alike.
    @Test(arguments: [
        (ScheduleSpec.Timing.every(milliseconds: 999), "an interval of 999 ms"),
        (.every(milliseconds: 0), "an interval of 0 ms"),
        (.every(milliseconds: 400 * 86_400_000), "366 days"),
        (.cron(try! CronExpression("0 9 * * *"), timeZone: "Mars/Olympus_Mons"), "unknown time zone"),
    ])
    func aBadTimingIsNamed(_ timing: ScheduleSpec.Timing, _ reason: String) {
        let spec = ScheduleSpec(name: "n", timing: timing, job: Self.job())
        #expect(spec.problem?.contains(reason) == true, "\(spec.problem ?? "nil")")
        #expect {
            _ = try ScheduleSpec(decoding: spec.encode())
        } throws: { error in
            "\(error)".contains(reason)
        }
    }

    @Test func badNamesPoliciesAndFieldsAreNamed() throws {
        let long = ScheduleSpec(
            name: String(repeating: "x", count: 10_240), timing: .every(milliseconds: 1000), job: Self.job())
        #expect(long.problem?.contains("schedule name") == true && long.problem?.contains("10240 bytes") == true)
        var many = ScheduleSpec(name: "n", timing: .every(milliseconds: 1000), job: Self.job())
        many.catchUp = .all(limit: 0)
        #expect(many.problem?.contains("a catch-up of 0 missed ticks") == true)
        many.catchUp = .all(limit: 5)
        #expect(many.problem?.contains("only overlap .allow lets run") == true, "all with skip")
        many.overlap = .allow
        #expect(many.problem == nil)
        let own = ScheduleSpec(
            name: "n", timing: .every(milliseconds: 1000), job: JobSubmission(service: "mmi.jobs.list", body: []))
        #expect(own.problem?.contains("the broker's own mmi.jobs.list") == true)
        var lax = ScheduleSpec(name: "n", timing: .every(milliseconds: 1000), job: Self.job()).encode()
        // [1][1]["n"][0][8-byte interval][overlap][catch-up=1 last][limit u16] → a limit with "last".
        lax[15] = 7
        #expect(throws: ProtocolError.invalidValue(name: "catch-up limit", reason: "7; 0 unless catch-up is 2 (all)")) {
            _ = try ScheduleSpec(decoding: lax)
        }
        var bytes = ScheduleSpec(name: "n", timing: .every(milliseconds: 1000), job: Self.job()).encode()
        // [version][1]["n"][timing] → an unknown timing.
        bytes[3] = 7
        #expect(throws: ProtocolError.invalidValue(name: "timing", reason: "7; 0 (an interval) or 1 (cron)")) {
            _ = try ScheduleSpec(decoding: bytes)
        }
        var cronBytes = ScheduleSpec(
            name: "n", timing: .cron(try CronExpression("* * * * *"), timeZone: "UTC"), job: Self.job()
        ).encode()
        // The expression's first character: "*" → "x".
        cronBytes[5] = UInt8(ascii: "x")
        #expect {
            _ = try ScheduleSpec(decoding: cronBytes)
        } throws: { error in
            "\(error)".contains("the minute field's \"x\"")
        }
    }

    /// An interval's ticks are the multiples of it since 1970: the same for every broker and
    /// after every restart, whenever the schedule was saved.
    @Test func theNextTick() throws {
        let hourly = ScheduleSpec(name: "n", timing: .every(milliseconds: 3_600_000), job: Self.job())
        #expect(hourly.next(after: 1_795_946_017_000) == 1_795_946_400_000)
        #expect(hourly.next(after: 1_795_946_400_000) == 1_795_950_000_000, "strictly after a tick")
        let second = ScheduleSpec(name: "n", timing: .every(milliseconds: 1000), job: Self.job())
        #expect(second.next(after: 999) == 1000)
        #expect(second.next(after: Int64.max - 10) == nil, "no tick past the end of time, no trap")
        let nine = ScheduleSpec(
            name: "n", timing: .cron(try CronExpression("0 9 * * *"), timeZone: "America/New_York"), job: Self.job())
        // 2026-11-30T14:00Z is 09:00 EST: the next is the day after (strictly later).
        #expect(nine.next(after: 1_796_047_200_000) == 1_796_133_600_000)
    }
}
