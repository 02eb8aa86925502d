import Testing

/// Every test that starts real processes lives under one of three suites, each of which runs its
/// tests one at a time: on a 2-core machine, failure-detection timings must not compete with
/// another cluster. A test that hangs fails after the time limit instead of stalling the run.
///
/// This suite holds the tests whose bounds are tight (failure detection, deadlines, memory
/// peaks under a flood) and those that keep both cores busy (fuzzing, chaos, benchmarks).
@Suite("Integration: real processes on loopback", .serialized, .timeLimit(.minutes(2)))
enum IntegrationSuite {}

/// The second line, run beside ``IntegrationSuite``: clusters killed, restarted and taken over
/// that spend their time waiting (a broker kept down, a lease lapsing, a database server killed
/// and started again) and whose bounds, where they have any, are seconds wide: they shorten the
/// run without disturbing the first line's timings (docs/developing.md says which test goes
/// where).
@Suite("Integration, second line: restarts, takeovers and stores", .serialized, .timeLimit(.minutes(2)))
enum SecondLineSuite {}

/// The third line, beside the other two: the command-line tools and `ops/sky`, the dashboard in
/// a browser, several hosts, and the job tests again on PostgreSQL: processes that mostly start,
/// wait and exit, with bounds seconds wide or none.
@Suite("Integration, third line: tools, pages, hosts and the jobs on PostgreSQL", .serialized, .timeLimit(.minutes(2)))
enum ThirdLineSuite {}
