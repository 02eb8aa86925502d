extension Duration {
    /// The duration in seconds, as a floating-point number (for rates and reports).
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
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

    @usableFromInline func whole(perSecond units: Int64) -> Int64 {
        let (product, overflow) = components.seconds.multipliedReportingOverflow(by: units)
        if overflow { return components.seconds < 0 ? Int64.min : Int64.max }
        let (sum, sumOverflow) = product.addingReportingOverflow(
            components.attoseconds / (1_000_000_000_000_000_000 / units))
        return sumOverflow ? (product < 0 ? Int64.min : Int64.max) : sum
    }
}
