import Testing

/// Every test that starts real processes lives under one of three suites, each of which runs its
/// tests one at a time: on a 2-core machine, failure-detection timings must not compete with
/// another cluster. A test that hangs fails after the time limit instead of stalling the run.
///
/// This suite holds the tests whose bounds are tight (failure detection, deadlines, memory
/// peaks under a flood) and those that keep both cores busy (fuzzing, chaos).
@Suite("Integration: real processes on loopback", .serialized, .timeLimit(.minutes(2)))
enum IntegrationSuite {}

/// The second line, run beside ``IntegrationSuite``: tests that spend their time waiting (a
/// broker kept down, a connect time-out, a browser, a link cut between hosts, a database
/// server killed and started again), the benchmark's smoke runs (which check figures, not
/// times), and whose bounds, where they have any, are seconds wide:
/// they shorten the run without disturbing the first line's timings (docs/developing.md says
/// which test goes where).
@Suite("Integration, second line: tools, pages, soaks and hosts", .serialized, .timeLimit(.minutes(2)))
enum SecondLineSuite {}

/// The third line: the restart soak alone, which spends most of its minute with the broker
/// down (30 s once, 5 s once) and whose bound (every worker back within 2 s) held beside the
/// first two lines; its own line takes that minute off the second's.
@Suite("Integration, third line: the restart soak", .serialized, .timeLimit(.minutes(2)))
enum ThirdLineSuite {}

/// Tests that start no executable: a broker and workers in this process
/// (``InProcessCluster``). They run in parallel, with each other and beside the three lines,
/// so none of them has a timing bound tighter than seconds.
@Suite("Integration in one process: a broker and workers on ipc://, in parallel", .timeLimit(.minutes(2)))
enum InProcessSuite {}
