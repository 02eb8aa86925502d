import Foundation

/// Timing bounds in tests are for normal builds; under a sanitizer (`ops/sky test --tsan`
/// sets `SKY_TIMING_SCALE`) every operation is several times slower, and bounds scale with it.
public let timingScale = Double(ProcessInfo.processInfo.environment["SKY_TIMING_SCALE"] ?? "") ?? 1

extension Duration {
    /// This bound, scaled for the build under test.
    public var scaled: Duration { self * timingScale }
}
