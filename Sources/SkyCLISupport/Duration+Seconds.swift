extension Duration {
    /// The duration in seconds, as a floating-point number (for rates and reports).
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
