/// A small seeded generator (SplitMix64): the same seed gives the same sequence on every
/// machine and every run, which makes a sector's image a pure function of its number.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) {
        state = seed
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return Self.mix(state)
    }

    /// The generator's output function: a bijection in which every bit of the result depends
    /// on every bit of `value` (the tables keyed by request id take their buckets from it).
    @inlinable
    public static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0..<bound` (bound > 0). Slightly biased for huge bounds; fine for images.
    public mutating func next(below bound: Int) -> Int {
        Int(next() % UInt64(bound))
    }
}
