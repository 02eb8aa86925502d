import Foundation
import Testing

@testable import SkyProtocol

@Suite("Cron expressions: parsing, and the next fire time across month ends, leap days and DST")
struct CronExpressionTests {
    /// An instant written in UTC, `2026-03-29T01:00`.
    static func utc(_ text: String) -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate]
        return formatter.date(from: text + ":00")!
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var expression: String
        var zone: String
        var after: String
        /// The next fire times, in UTC, one after the other.
        var fires: [String]
        var testDescription: String { "\(expression) in \(zone) after \(after)" }
    }

    static let cases: [Case] = [
        // Minutes, hours, steps, lists.
        Case(
            expression: "*/15 * * * *", zone: "UTC", after: "2026-11-29T10:07",
            fires: ["2026-11-29T10:15", "2026-11-29T10:30"]),
        Case(
            expression: "5/20 9-10 * * *", zone: "UTC", after: "2026-11-29T09:30",
            fires: ["2026-11-29T09:45", "2026-11-29T10:05", "2026-11-29T10:25", "2026-11-29T10:45", "2026-11-30T09:05"]),
        Case(
            expression: "0 0,12 * * *", zone: "UTC", after: "2026-11-29T12:00",
            fires: ["2026-11-30T00:00", "2026-11-30T12:00"]),
        // Month ends: a day some months lack is skipped in them.
        Case(
            expression: "0 0 31 * *", zone: "UTC", after: "2026-01-31T00:00",
            fires: ["2026-03-31T00:00", "2026-05-31T00:00", "2026-07-31T00:00", "2026-08-31T00:00"]),
        Case(expression: "0 0 30 * *", zone: "UTC", after: "2026-01-30T00:00", fires: ["2026-03-30T00:00"]),
        Case(expression: "59 23 31 12 *", zone: "UTC", after: "2026-12-31T23:59", fires: ["2027-12-31T23:59"]),
        Case(expression: "0 0 1 * *", zone: "UTC", after: "2026-12-31T23:59", fires: ["2027-01-01T00:00"]),
        // Leap days: every fourth year, not 2100.
        Case(
            expression: "0 0 29 2 *", zone: "UTC", after: "2026-01-01T00:00",
            fires: ["2028-02-29T00:00", "2032-02-29T00:00"]),
        Case(expression: "0 0 29 2 *", zone: "UTC", after: "2096-03-01T00:00", fires: ["2104-02-29T00:00"]),
        Case(
            expression: "0 12 28-29 FEB *", zone: "UTC", after: "2028-02-28T12:00",
            fires: ["2028-02-29T12:00", "2029-02-28T12:00"]),
        // Days of the week, names, 7 as Sunday, and both day fields (either matches).
        Case(expression: "0 9 * * MON-FRI", zone: "UTC", after: "2026-11-27T09:00", fires: ["2026-11-30T09:00"]),
        Case(
            expression: "0 9 * * 7", zone: "UTC", after: "2026-11-27T09:00",
            fires: ["2026-11-29T09:00", "2026-12-06T09:00"]),
        Case(
            expression: "0 0 13 * fri", zone: "UTC", after: "2026-11-01T00:00",
            fires: ["2026-11-06T00:00", "2026-11-13T00:00", "2026-11-20T00:00"]),
        Case(
            expression: "0 0 13 * *", zone: "UTC", after: "2026-11-01T00:00",
            fires: ["2026-11-13T00:00", "2026-12-13T00:00"]),
        Case(expression: "@weekly", zone: "UTC", after: "2026-11-27T00:00", fires: ["2026-11-29T00:00"]),
        Case(expression: "@yearly", zone: "UTC", after: "2026-11-27T00:00", fires: ["2027-01-01T00:00"]),
        // A zone without daylight saving: its offset, nothing else.
        Case(expression: "0 9 * * *", zone: "Asia/Tokyo", after: "2026-11-29T00:00", fires: ["2026-11-30T00:00"]),
        // Berlin, spring: 02:00 CET jumps to 03:00 CEST on 29 March 2026 (01:00 UTC).
        // A calendar tick in the gap fires once, when the clock jumps; an hourly one does not.
        Case(
            expression: "30 2 * * *", zone: "Europe/Berlin", after: "2026-03-28T12:00",
            fires: ["2026-03-29T01:00", "2026-03-30T00:30"]),
        Case(
            expression: "*/20 2 * * *", zone: "Europe/Berlin", after: "2026-03-28T12:00",
            fires: ["2026-03-29T01:00", "2026-03-30T00:00"]),
        Case(
            expression: "0 2,3 * * *", zone: "Europe/Berlin", after: "2026-03-28T12:00",
            fires: ["2026-03-29T01:00", "2026-03-30T00:00"]),
        Case(
            expression: "30 * * * *", zone: "Europe/Berlin", after: "2026-03-29T00:00",
            fires: ["2026-03-29T00:30", "2026-03-29T01:30"]),
        // Berlin, autumn: 03:00 CEST goes back to 02:00 CET on 25 October 2026 (01:00 UTC).
        // A calendar tick in the repeated hour fires once, at its first instant; an hourly one at both.
        Case(
            expression: "30 2 * * *", zone: "Europe/Berlin", after: "2026-10-24T12:00",
            fires: ["2026-10-25T00:30", "2026-10-26T01:30"]),
        Case(
            expression: "30 * * * *", zone: "Europe/Berlin", after: "2026-10-24T23:00",
            fires: ["2026-10-24T23:30", "2026-10-25T00:30", "2026-10-25T01:30", "2026-10-25T02:30"]),
        // New York, spring: 02:00 EST jumps to 03:00 EDT on 8 March 2026 (07:00 UTC).
        Case(
            expression: "0 2 * * *", zone: "America/New_York", after: "2026-03-07T12:00",
            fires: ["2026-03-08T07:00", "2026-03-09T06:00"]),
        Case(
            expression: "*/30 * * * *", zone: "America/New_York", after: "2026-03-08T06:00",
            fires: ["2026-03-08T06:30", "2026-03-08T07:00", "2026-03-08T07:30"]),
        // New York, autumn: 02:00 EDT goes back to 01:00 EST on 1 November 2026 (06:00 UTC).
        Case(
            expression: "30 1 * * *", zone: "America/New_York", after: "2026-10-31T12:00",
            fires: ["2026-11-01T05:30", "2026-11-02T06:30"]),
        Case(
            expression: "*/30 * * * *", zone: "America/New_York", after: "2026-11-01T04:45",
            fires: ["2026-11-01T05:00", "2026-11-01T05:30", "2026-11-01T06:00", "2026-11-01T06:30", "2026-11-01T07:00"]),
        // Midnight in New York on the day it goes back: an ordinary day start.
        Case(
            expression: "@daily", zone: "America/New_York", after: "2026-10-31T12:00",
            fires: ["2026-11-01T04:00", "2026-11-02T05:00"]),
    ]

    @Test(arguments: cases)
    func theNextFireTimes(_ example: Case) throws {
        let expression = try CronExpression(example.expression)
        let zone = try TimeZone.named(example.zone)
        var after = Self.utc(example.after)
        for expected in example.fires {
            let next = try #require(expression.next(after: after, in: zone))
            #expect(next == Self.utc(expected), "after \(after): \(next), expected \(expected)")
            after = next
        }
    }

    /// The time a fire is asked for from is not a tick itself: the next is strictly later,
    /// also from within a minute.
    @Test func theNextTickIsStrictlyLater() throws {
        let everyMinute = try CronExpression("* * * * *")
        let zone = try TimeZone.named("UTC")
        #expect(everyMinute.next(after: Self.utc("2026-11-29T10:00"), in: zone) == Self.utc("2026-11-29T10:01"))
        let within = Self.utc("2026-11-29T10:00").addingTimeInterval(59.9)
        #expect(everyMinute.next(after: within, in: zone) == Self.utc("2026-11-29T10:01"))
    }

    /// Each mistake is refused with what is wrong, never a trap or an expression that never fires.
    @Test(arguments: [
        ("0 0 0 0 0 0", "has 6 fields; a cron expression has 5"),
        ("* * * *", "has 4 fields"),
        ("", "has 0 fields"),
        ("*/0 * * * *", "the minute field's \"*/0\": a step must be a whole number of at least 1"),
        ("0 0 30 2 *", "never fires: February has no day 30"),
        ("0 0 31 4,6,9,11 *", "never fires: April, June, September and November have no day 31"),
        ("60 * * * *", "the minute field's \"60\": \"60\" is not a value of 0–59"),
        ("0 24 * * *", "the hour field's \"24\""),
        ("0 0 0 * *", "the day-of-month field's \"0\""),
        ("0 0 * 13 *", "the month field's \"13\""),
        ("0 0 * * 8", "the day-of-week field's \"8\""),
        ("0 0 * * FRI-MON", "a range goes from the lower value to the higher"),
        ("0 0 L * *", "the day-of-month field's \"L\""),
        ("0 0 ? * *", "the day-of-month field's \"?\""),
        ("1,,2 * * * *", "the minute field's \"\""),
        ("@reboot", "unknown alias @reboot"),
        (String(repeating: "1,", count: 200) + "1 * * * *", "bytes; at most 256"),
    ])
    func aMistakeIsNamed(_ text: String, _ reason: String) {
        #expect {
            _ = try CronExpression(text)
        } throws: { error in
            (error as? CronError)?.description.contains(reason) == true
        }
    }

    @Test func anUnknownTimeZoneIsNamed() {
        #expect(throws: CronError.self) { _ = try TimeZone.named("Europe/Atlantis") }
        // Foundation reads these with the opposite sign to POSIX's TZ: not IANA names, refused.
        #expect(throws: CronError.self) { _ = try TimeZone.named("UTC+5") }
        #expect(throws: CronError.self) { _ = try TimeZone.named("GMT+5") }
        #expect((try? TimeZone.named("Etc/GMT+5"))?.secondsFromGMT() == -5 * 3600)
        #expect((try? TimeZone.named("UTC"))?.secondsFromGMT() == 0)
        #expect(throws: CronError.self) { _ = try TimeZone.named(String(repeating: "A", count: 10_000)) }
        #expect((try? TimeZone.named("Europe/Berlin"))?.identifier == "Europe/Berlin")
    }

    /// The arithmetic behind the day loop, against Foundation's calendar from 1900 to 2300
    /// (before 15 October 1582 Foundation's calendar is Julian; the arithmetic stays Gregorian).
    @Test func civilDatesAgreeWithFoundation() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        for day in stride(from: Int64(-25_567), through: 120_526, by: 7) {
            let date = Date(timeIntervalSince1970: TimeInterval(day * 86_400))
            let parts = calendar.dateComponents([.year, .month, .day], from: date)
            let civil = CronExpression.civil(fromDays: day)
            #expect(civil.year == Int64(parts.year!) && civil.month == parts.month && civil.day == parts.day)
        }
    }
}
