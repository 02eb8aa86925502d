import SkyWire
import Testing

/// `wholeNanoseconds` and `wholeMilliseconds` divide a duration's 128-bit attoseconds by a
/// 64-bit divisor in one machine division: they must say what `Int128` arithmetic says,
/// rounded toward zero and saturating at `Int64`'s bounds, for every duration.
@Suite("Durations in whole units")
struct DurationUnitsTests {
    /// What the units must be: the quotient by `Int128`'s division, clamped.
    static func expected(_ duration: Duration, perSecond units: Int64) -> Int64 {
        let whole = duration.attoseconds / Int128(1_000_000_000_000_000_000 / units)
        return Int64(clamping: whole)
    }

    /// Durations at the edges: around zero, around each unit, around the quotients 2⁶³ and
    /// 2⁶⁴ (saturation), the largest and smallest `Duration`s, and random ones at every scale.
    static var durations: [Duration] {
        var attoseconds: [Int128] = [0, 1, -1, 999_999, 1_000_000, -1_000_000, 1_000_000_000_000_000_000]
        for units in [Int64(1000), 1_000_000_000] {
            let divisor = Int128(1_000_000_000_000_000_000 / units)
            for quotient in [Int128(Int64.max), Int128(Int64.max) + 1, Int128(UInt64.max), Int128(UInt64.max) + 1] {
                for nudge in [Int128(-1), 0, 1] {
                    attoseconds.append(quotient * divisor + nudge)
                    attoseconds.append(-quotient * divisor + nudge)
                }
            }
        }
        attoseconds += [Int128.max, Int128.min, Int128.min + 1]
        var random = SystemRandomNumberGenerator()
        for bits in stride(from: 1, through: 126, by: 5) {
            for _ in 0..<20 {
                let magnitude =
                    Int128(UInt64.random(in: 0...UInt64.max, using: &random)) << 62
                    | Int128(UInt64.random(in: 0...UInt64.max, using: &random))
                let value = magnitude >> (126 - bits)
                attoseconds.append(Bool.random(using: &random) ? value : -value)
            }
        }
        return attoseconds.map { Duration(attoseconds: $0) }
    }

    @Test func wholeUnitsAreTheInt128QuotientClamped() {
        let mismatches = Self.durations.filter { duration in
            duration.wholeNanoseconds != Self.expected(duration, perSecond: 1_000_000_000)
                || duration.wholeMilliseconds != Self.expected(duration, perSecond: 1000)
        }
        #expect(
            mismatches.count == 0,
            "of \(Self.durations.count), first \(mismatches.first.map { "\($0.attoseconds)" } ?? "")")
    }
}
