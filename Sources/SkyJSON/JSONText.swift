/// Small JSON and time writers for the broker's per-message paths.
///
/// A deadline storm makes the broker answer and publish about 100,000 failures in a moment;
/// building a `JSONEncoder` or an `ISO8601DateFormatter` for each (as `CanonicalJSON` does)
/// stalled it for seconds. These write bytes directly, in a cost independent of load, and give
/// the same text as `CanonicalJSON` for the values the broker writes.
package enum JSONText {
    /// Appends `value` as a JSON string literal (quoted and escaped, `/` left as is).
    package static func appendString(_ value: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        // Most strings need no escape: one scan, then one copy (a 1 KiB task's text in the typed
        // path), instead of an append per byte.
        let plain = value.utf8.withContiguousStorageIfAvailable { utf8 in
            guard !needsEscape(utf8) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if plain == true {
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case 0..<0x20:
                bytes += Array("\\u00".utf8)
                bytes.append(hexDigit(byte >> 4))
                bytes.append(hexDigit(byte & 0xF))
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether `text` holds a byte a JSON string must escape (`"`, `\\` or a control character).
    static func needsEscape(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        firstSpecial(in: text, from: 0, nonASCII: false) < text.count
    }

    /// The index of the first byte from `start` that is `"`, `\\`, a control character or (if
    /// `nonASCII`) above 0x7F; `text.count` if there is none.
    ///
    /// Eight bytes per step, with the bit tricks that find a byte below a value, or equal to
    /// one, in a word: a task's text is checked a word at a time instead of byte by byte.
    static func firstSpecial(in text: UnsafeBufferPointer<UInt8>, from start: Int, nonASCII: Bool) -> Int {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let high = nonASCII ? highs : 0
        var index = start
        if let base = text.baseAddress {
            while index + 8 <= text.count {
                let word = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let control = (word &- ones &* 0x20) & ~word
                let zeroQuote = (quote &- ones) & ~quote
                let zeroBackslash = (backslash &- ones) & ~backslash
                if (control | zeroQuote | zeroBackslash) & highs | word & high != 0 { break }
                index += 8
            }
        }
        while index < text.count {
            let byte = text[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || (nonASCII && byte >= 0x80) {
                return index
            }
            index += 1
        }
        return index
    }

    /// Appends a decimal integer, digit by digit (no `String` made for it).
    package static func appendInteger(_ value: some FixedWidthInteger, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = UInt64(value.magnitude)
        let start = bytes.count
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        } while magnitude > 0
        bytes[start...].reverse()
    }

    /// Appends `"key":` after a comma, or after nothing for an object's first member.
    package static func appendKey(_ key: String, first: Bool = false, to bytes: inout [UInt8]) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        appendString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Appends a member `"key":"value"` (see ``appendKey(_:first:to:)``).
    package static func appendMember(_ key: String, _ value: String, first: Bool = false, to bytes: inout [UInt8]) {
        appendKey(key, first: first, to: &bytes)
        appendString(value, to: &bytes)
    }

    /// Milliseconds since 1970 as ISO 8601 UTC with milliseconds: `2026-11-22T04:14:27.595Z`.
    /// Pure arithmetic (the proleptic Gregorian calendar from a day count), no formatter.
    package static func timestamp(millisecondsSince1970 milliseconds: Int64) -> String {
        let (days, dayMilliseconds) = milliseconds.quotientAndRemainderFlooringDivision(by: 86_400_000)
        let (year, month, day) = civilDate(daysSince1970: days)
        let secondOfDay = dayMilliseconds / 1000
        var text = [UInt8]()
        text.reserveCapacity(24)
        appendPadded(year, width: 4, to: &text)
        text.append(UInt8(ascii: "-"))
        appendPadded(month, width: 2, to: &text)
        text.append(UInt8(ascii: "-"))
        appendPadded(day, width: 2, to: &text)
        text.append(UInt8(ascii: "T"))
        appendPadded(secondOfDay / 3600, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendPadded(secondOfDay / 60 % 60, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendPadded(secondOfDay % 60, width: 2, to: &text)
        text.append(UInt8(ascii: "."))
        appendPadded(dayMilliseconds % 1000, width: 3, to: &text)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    /// Year, month (1–12) and day (1–31) of a day count since 1970-01-01 (H. Hinnant's algorithm).
    static func civilDate(daysSince1970: Int64) -> (Int64, Int64, Int64) {
        let z = daysSince1970 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func appendPadded(_ value: Int64, width: Int, to bytes: inout [UInt8]) {
        let digits = Array(String(value).utf8)
        if digits.count < width { bytes += repeatElement(UInt8(ascii: "0"), count: width - digits.count) }
        bytes += digits
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}

extension Int64 {
    /// Quotient rounded towards minus infinity, and a remainder in 0..<divisor.
    fileprivate func quotientAndRemainderFlooringDivision(by divisor: Int64) -> (Int64, Int64) {
        let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}
