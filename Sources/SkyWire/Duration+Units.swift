import CSkySystem

extension Duration {
    /// The duration in seconds, as a floating-point number (for rates and reports).
    public var inSeconds: Double {
        // `components` traps beyond Int64.max seconds; such a duration is "forever" to a report.
        let bound = Duration.seconds(Int64.max)
        if self >= bound { return .infinity }
        if self <= .zero - bound { return -.infinity }
        return Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// Whole milliseconds, rounded toward zero (what the wire's `timeout-ms` and events carry);
    /// saturating at `Int64.min` and `Int64.max` for durations beyond them, never trapping.
    @inlinable public var wholeMilliseconds: Int64 { whole(perSecond: 1000) }

    /// Whole nanoseconds, rounded toward zero, saturating as ``wholeMilliseconds`` does (beyond
    /// about 292 years either way).
    @inlinable public var wholeNanoseconds: Int64 { whole(perSecond: 1_000_000_000) }

    /// The longest wait Sky's timers take: a century. The standard library's clocks trap on
    /// sleeps near `Int64.max` seconds (measured: `ContinuousClock().sleep(for: .seconds(Int64.max))`
    /// ends the process; 9 × 10¹⁵ s does not), so a longer wait, such as a caller's way of saying
    /// "never", is this.
    public static let longestSleep: Duration = .seconds(100 * 365 * 86_400)

    /// This duration as a wait: within zero and ``longestSleep``.
    public var asSleep: Duration { min(max(self, .zero), .longestSleep) }

    /// Whole `units` per second, saturating. From the 128-bit attoseconds, which hold any
    /// duration (`components` traps beyond `Int64.max` seconds, such as an instant plus
    /// `.seconds(Int64.max)` measured from an earlier one, and its software 128-bit division ran
    /// on every call a client made).
    ///
    /// Divided as a 128-bit magnitude by a 64-bit divisor in one machine division
    /// (`sky_divide_wide`), not by `Int128`'s signed `/`, whose general routine cost four times
    /// the instructions, nor by `dividingFullWidth`, itself a library call: this runs on every
    /// call a client makes (its attempt timeout and its timer) and on every task the broker
    /// dispatches.
    @inlinable func whole(perSecond units: Int64) -> Int64 {
        // Attoseconds per unit: at most 10¹⁸ (a unit of a second), so it fits a word.
        let divisor = UInt64(1_000_000_000_000_000_000 / units)
        let magnitude = attoseconds.magnitude
        let high = UInt64(truncatingIfNeeded: magnitude >> 64)
        let negative = attoseconds < 0
        // A quotient of 2⁶⁴ or more is beyond Int64 either way.
        guard high < divisor else { return negative ? .min : .max }
        let quotient = sky_divide_wide(high, UInt64(truncatingIfNeeded: magnitude), divisor)
        if negative {
            return quotient > UInt64(Int64.max) ? .min : -Int64(quotient)
        }
        return quotient > UInt64(Int64.max) ? .max : Int64(quotient)
    }
}
