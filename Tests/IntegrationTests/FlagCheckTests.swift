import SkyCLISupport
import Testing

/// The one line a bad flag value ends a program with.
@Suite("Flag checks: the line a bad value gets")
struct FlagCheckTests {
    /// A range open above names its lower bound only: `skyctl jobs list --limit 0` was told
    /// "in 1...9223372036854775807".
    @Test func aRangeOpenAboveNamesItsLowerBoundOnly() {
        #expect {
            try FlagCheck.integer(0, "--limit", in: 1...Int.max)
        } throws: { "\($0)" == "--limit must be a whole number of at least 1, not 0" }
        #expect {
            try FlagCheck.integer(UInt32(0), "--capacity", in: 1...UInt32(65536))
        } throws: { "\($0)" == "--capacity must be a whole number in 1...65536, not 0" }
    }
}
