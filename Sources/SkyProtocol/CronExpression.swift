import Foundation

/// A standard five-field cron expression (`minute hour day-of-month month day-of-week`), or one
/// of the aliases `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and
/// `@hourly`, and when it next fires in a time zone.
///
/// Part of the wire contract: a schedule carries the expression's text, and client and broker
/// read it with this one parser, so that an expression the client accepts is one the broker
/// fires as the client computed.
///
/// Each field is a list (`,`) of `*`, a value, or a range `a-b`, each optionally with a step
/// (`*/15`, `0-30/10`, `5/20` is `5-59/20`). Months take `JAN`–`DEC`, days of the week
/// `SUN`–`SAT` (and `0`–`7`, both `0` and `7` Sunday), in any case. When both day fields are
/// restricted (not every day), a day matches if either matches; when one covers every day, the
/// other decides (as every cron since Vixie's).
///
/// Daylight-saving changes (docs/jobs.md, "Schedules"), as Vixie cron does: an expression
/// that fires at every hour (its hour field covers 0–23) follows real time, so a tick in a
/// skipped hour does not fire and a tick in a repeated hour fires at both of its instants; any
/// other expression follows the calendar, so a tick in a skipped hour fires once, when the
/// clock jumps (the end of the gap), and a tick in a repeated hour fires once, at its first
/// instant.
public struct CronExpression: Sendable, Equatable, CustomStringConvertible {
    /// The expression as written.
    public let text: String
    private let minutes: UInt64
    private let hours: UInt32
    private let days: UInt32
    private let months: UInt16
    private let weekdays: UInt8
    private let daysRestricted: Bool
    private let weekdaysRestricted: Bool

    /// The longest expression taken: a schedule's is stored and sent with it.
    public static let maxLength = 256

    public var description: String { text }

    /// Reads `text`; every mistake is a ``CronError`` naming the field and what is wrong.
    public init(_ text: String) throws(CronError) {
        guard text.utf8.count <= Self.maxLength else {
            throw CronError("a cron expression of \(text.utf8.count) bytes; at most \(Self.maxLength)")
        }
        self.text = text
        var fields = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        if fields.count == 1, let alias = fields.first, alias.hasPrefix("@") {
            guard let expanded = Self.aliases[alias.lowercased()] else {
                throw CronError(
                    "unknown alias \(alias): the known ones are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly"
                )
            }
            fields = expanded.split(separator: " ").map(String.init)
        }
        guard fields.count == 5 else {
            throw CronError(
                "\"\(text)\" has \(fields.count) field\(fields.count == 1 ? "" : "s"); a cron expression has 5 (minute hour day-of-month month day-of-week), without seconds: for a schedule under a minute, use an interval"
            )
        }
        let minuteSet = try Self.field(fields[0], .minute)
        let hourSet = try Self.field(fields[1], .hour)
        let daySet = try Self.field(fields[2], .day)
        let monthSet = try Self.field(fields[3], .month)
        var weekdaySet = try Self.field(fields[4], .weekday)
        if weekdaySet & (1 << 7) != 0 { weekdaySet = (weekdaySet | 1) & ~(1 << 7) }  // 7 is Sunday too
        minutes = minuteSet
        hours = UInt32(hourSet)
        days = UInt32(daySet)
        months = UInt16(monthSet)
        weekdays = UInt8(weekdaySet)
        daysRestricted = daySet != Field.day.all
        weekdaysRestricted = weekdays != 0x7F
        if daysRestricted && !weekdaysRestricted { try checkSomeMonthHasADay() }
    }

    /// The expression fires at every hour: it follows real time across daylight-saving changes.
    public var firesEveryHour: Bool { hours == 0xFF_FFFF }

    /// The first instant after `instant` at which the expression fires in `zone`, at the start of
    /// its minute; `nil` if none within 30 years (a 29 February in a leap year falls within 8).
    public func next(after instant: Date, in zone: TimeZone) -> Date? {
        let after = Int64(instant.timeIntervalSince1970.rounded(.down))
        // The local day of `instant`: no earlier day has an instant after it.
        let local = after + Int64(zone.secondsFromGMT(for: instant))
        var day = Self.floorDivide(local, 86_400)
        // Wall times come in order, instants not quite: the second pass of a repeated hour is
        // later than the wall times after it until the clock catches up. So the earliest
        // instant is kept until the wall times are past it by more than any jump (3 hours).
        var best: (fire: Int64, wall: Int64)?
        for _ in 0..<(366 * 30) {
            defer { day += 1 }
            let (_, month, dayOfMonth) = Self.civil(fromDays: day)
            guard months & (1 << month) != 0, matches(day: day, dayOfMonth: dayOfMonth) else { continue }
            for hour in 0..<24 where hours & (1 << hour) != 0 {
                for minute in 0..<60 where minutes & (1 << minute) != 0 {
                    let wall = day * 86_400 + Int64(hour * 3600 + minute * 60)
                    if let best, wall > best.wall + 10_800 {
                        return Date(timeIntervalSince1970: TimeInterval(best.fire))
                    }
                    // No zone is more than 12 hours behind UTC: this wall time is no later instant.
                    if wall + 43_200 <= after { continue }
                    if let fire = firstInstant(ofWall: wall, in: zone, after: after), fire < best?.fire ?? .max {
                        // No change of offset from `after` to 3 hours past it (nearly always):
                        // instants follow wall times, and nothing can come first.
                        if best == nil, Self.offset(zone, after) == Self.offset(zone, fire + 10_800) {
                            return Date(timeIntervalSince1970: TimeInterval(fire))
                        }
                        best = (fire, best?.wall ?? wall)
                    }
                }
            }
        }
        return best.map { Date(timeIntervalSince1970: TimeInterval($0.fire)) }
    }

    /// The instants at which local wall time `wall` (seconds since 1970 as if the zone were UTC)
    /// fires, by the daylight-saving rule above; the first after `after`.
    private func firstInstant(ofWall wall: Int64, in zone: TimeZone, after: Int64) -> Int64? {
        let before = Self.offset(zone, wall - 86_400)
        let later = Self.offset(zone, wall + 86_400)
        let instants = Set([wall - before, wall - later]).filter { Self.offset(zone, $0) == wall - $0 }.sorted()
        let fires: [Int64]
        switch instants.count {
        case 0:
            // Skipped by a jump forward: the calendar's tick fires when the clock jumps.
            fires =
                firesEveryHour ? [] : [Self.transition(from: wall - later, to: wall - before, in: zone, offset: later)]
        case 1:
            fires = instants
        default:
            // Repeated by a jump back: real time fires both; the calendar, the first.
            fires = firesEveryHour ? instants : [instants[0]]
        }
        return fires.first { $0 > after }
    }

    private static func offset(_ zone: TimeZone, _ instant: Int64) -> Int64 {
        Int64(zone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(instant))))
    }

    /// The first instant in `low...high` whose offset is `offset` (the clock's jump).
    private static func transition(from low: Int64, to high: Int64, in zone: TimeZone, offset: Int64) -> Int64 {
        var (low, high) = (low, high)
        while low < high {
            let middle = low + (high - low) / 2
            if Self.offset(zone, middle) == offset {
                high = middle
            } else {
                low = middle + 1
            }
        }
        return low
    }

    private func matches(day: Int64, dayOfMonth: Int) -> Bool {
        let weekday = Int(Self.floorModulo(day + 4, 7))  // 1970-01-01 was a Thursday (4)
        let byDay = days & (1 << dayOfMonth) != 0
        let byWeekday = weekdays & (1 << weekday) != 0
        if daysRestricted && weekdaysRestricted { return byDay || byWeekday }
        return byDay && byWeekday
    }

    /// An expression restricted by day of the month alone must have a day some month has: `0 0
    /// 30 2 *` would never fire.
    private func checkSomeMonthHasADay() throws(CronError) {
        let longest = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        let chosen = (1...12).filter { months & (1 << $0) != 0 }
        let firstDay: Int = (1...31).first(where: { days & (1 << $0) != 0 }) ?? 1
        guard !chosen.contains(where: { firstDay <= longest[$0] }) else { return }
        let names = chosen.map { Self.monthNames[$0 - 1] }
        throw CronError(
            "\"\(text)\" never fires: \(names.count == 1 ? "\(names[0]) has" : "\(names.dropLast().joined(separator: ", ")) and \(names.last!) have") no day \(firstDay)"
        )
    }

    // MARK: Fields

    enum Field: CaseIterable {
        case minute, hour, day, month, weekday

        var name: String {
            switch self {
            case .minute: "minute"
            case .hour: "hour"
            case .day: "day-of-month"
            case .month: "month"
            case .weekday: "day-of-week"
            }
        }

        var range: ClosedRange<Int> {
            switch self {
            case .minute: 0...59
            case .hour: 0...23
            case .day: 1...31
            case .month: 1...12
            case .weekday: 0...7
            }
        }

        /// Every value of the field, as a set (for the day of the week, 0–6: 7 is 0).
        var all: UInt64 {
            let values = self == .weekday ? 0...6 : range
            return values.reduce(0) { $0 | 1 << $1 }
        }

        var names: [String] {
            switch self {
            case .month: CronExpression.monthNames.map { $0.prefix(3).lowercased() }
            case .weekday: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
            default: []
            }
        }
    }

    /// In English whatever the locale: errors are read in logs and next to the docs.
    static let monthNames = [
        "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
        "December",
    ]

    private static let aliases: [String: String] = [
        "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
        "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
    ]

    /// A field's values as a bit set (bit n: value n).
    private static func field(_ text: String, _ field: Field) throws(CronError) -> UInt64 {
        var set: UInt64 = 0
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            var step = 1
            if parts.count == 2 {
                guard let value = Int(parts[1]), value >= 1 else {
                    throw CronError(
                        "the \(field.name) field's \"\(item)\": a step must be a whole number of at least 1")
                }
                step = value
            }
            let span: ClosedRange<Int>
            if parts[0] == "*" {
                span = field.range
            } else if let dash = parts[0].firstIndex(of: "-") {
                let low = try value(parts[0][..<dash], field, item)
                let high = try value(parts[0][parts[0].index(after: dash)...], field, item)
                guard low <= high else {
                    throw CronError(
                        "the \(field.name) field's \"\(item)\": a range goes from the lower value to the higher")
                }
                span = low...high
            } else {
                let low = try value(parts[0], field, item)
                span = low...(parts.count == 2 ? field.range.upperBound : low)
            }
            for value in stride(from: span.lowerBound, through: span.upperBound, by: step) { set |= 1 << value }
        }
        return set
    }

    private static func value(_ text: Substring, _ field: Field, _ item: Substring) throws(CronError) -> Int {
        if let index = field.names.firstIndex(of: text.lowercased()) {
            return field == .month ? index + 1 : index
        }
        guard let value = Int(text), field.range.contains(value) else {
            let named = field.names.isEmpty ? "" : " or a name (\(field.names.first!.uppercased())…)"
            throw CronError(
                "the \(field.name) field's \"\(item)\": \"\(text)\" is not a value of \(field.range.lowerBound)–\(field.range.upperBound)\(named)"
            )
        }
        return value
    }

    // MARK: Calendar arithmetic

    /// Year, month and day of the `days`-th day since 1970-01-01 (proleptic Gregorian; Howard
    /// Hinnant's `civil_from_days`): plain arithmetic, where Foundation's calendar would be
    /// asked once per candidate day.
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int, day: Int) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * shiftedMonth + 2) / 5 + 1)
        let month = Int(shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9)
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        value >= 0 ? value / divisor : (value - divisor + 1) / divisor
    }

    private static func floorModulo(_ value: Int64, _ divisor: Int64) -> Int64 {
        value - floorDivide(value, divisor) * divisor
    }
}

/// A cron expression or time zone that cannot be used, and why.
public struct CronError: Error, Equatable, CustomStringConvertible {
    public let description: String

    init(_ description: String) { self.description = description }
}

extension TimeZone {
    /// The zone named `identifier` (an IANA name such as `Europe/Berlin`, or `UTC`).
    /// - Throws: ``CronError`` naming it when the system knows no such zone.
    public static func named(_ identifier: String) throws(CronError) -> TimeZone {
        // Foundation also takes `UTC+5` and `GMT+5` (not IANA names), with the opposite sign to
        // POSIX's `TZ`: refused (`Etc/GMT+5` is the IANA name, with POSIX's sign).
        let offsetName = (identifier.hasPrefix("UTC") || identifier.hasPrefix("GMT")) && identifier.count > 3
        guard identifier.utf8.count <= 64, !offsetName, let zone = TimeZone(identifier: identifier)
        else {
            throw CronError(
                "unknown time zone \"\(identifier.prefix(64))\": use an IANA name such as Europe/Berlin or America/New_York, or UTC"
            )
        }
        return zone
    }
}
