import Testing

/// Every test that starts real processes lives under one of two suites, each of which runs its
/// tests one at a time: on a 2-core machine, failure-detection timings must not compete with
/// another cluster. A test that hangs fails after the time limit instead of stalling the run.
///
/// This suite holds the tests whose bounds are tight (failure detection, deadlines, memory
/// peaks under a flood) and those that keep both cores busy (fuzzing, chaos, benchmarks).
@Suite("Integration: real processes on loopback", .serialized, .timeLimit(.minutes(2)))
enum IntegrationSuite {}

/// The second line, run beside ``IntegrationSuite``: tests that spend their time waiting (a
/// broker kept down, a connect time-out, a browser, a link cut between hosts, a database
/// server killed and started again) and whose bounds, where they have any, are seconds wide:
/// they shorten the run without disturbing the first line's timings (docs/developing.md says
/// which test goes where).
@Suite("Integration, second line: tools, pages, soaks and hosts", .serialized, .timeLimit(.minutes(2)))
enum SecondLineSuite {}
