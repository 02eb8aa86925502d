import Testing

@testable import skyscan

/// skyscan's summary: a throughput of work done, and one line per kind of failure.
@Suite("skyscan: its summary")
struct ScanSummaryTests {
    /// Ten calls that failed alike after slightly different times were ten lines ("for
    /// 15.344 s", "for 15.347 s", …), and a run that completed nothing reported thousands of
    /// tasks a second.
    @Test func failuresAlikeButForTheirTimesAreOneKind() {
        var summary = ScanSummary(
            sectors: 10, completed: 0, failed: 10, retried: 20, mismatches: 0, verified: false, blobs: 0,
            elapsedSeconds: 15.4, tasksPerSecond: 0, p50Milliseconds: 0, p99Milliseconds: 0, errors: [:])
        for milliseconds in 340..<350 {
            SkyScanCommand.count(
                "the broker is unreachable: no connection to the broker for 15.\(milliseconds) s (attempt 3)",
                in: &summary)
        }
        #expect(summary.errors == ["the broker is unreachable: no connection to the broker for … s (attempt 3)": 10])
    }
}
