import Testing

/// Every test that starts real processes lives under this suite, which runs its tests one at a
/// time: on a 2-core machine, failure-detection timings must not compete with another cluster.
/// A test that hangs fails after the time limit instead of stalling the whole run.
@Suite("Integration: real processes on loopback", .serialized, .timeLimit(.minutes(2)))
enum IntegrationSuite {}
