extension Duration {
    /// The duration in seconds, as a floating-point number (for rates and reports).
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// Whole milliseconds, rounded toward zero (what the wire's `timeout-ms` and events carry);
    /// saturating at `Int64.min` and `Int64.max` for durations beyond them, never trapping.
    public var wholeMilliseconds: Int64 {
        let (product, overflow) = components.seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return components.seconds < 0 ? Int64.min : Int64.max }
        let (sum, sumOverflow) = product.addingReportingOverflow(components.attoseconds / 1_000_000_000_000_000)
        return sumOverflow ? (product < 0 ? Int64.min : Int64.max) : sum
    }
}
