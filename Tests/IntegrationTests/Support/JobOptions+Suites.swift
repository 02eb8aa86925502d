import Sky

extension JobOptions {
    /// For the suites' durable loads, which test what becomes of jobs, not the submit's
    /// deadline: on a fresh clone's CI with its disk under pressure (other suites' fsyncs, a
    /// PostgreSQL server's), a commit took more than the default 850 ms, and the thousands of
    /// submits of five soaks failed with it (`journalUnavailable`, as documented). Every test
    /// that submits hundreds of jobs at once uses it.
    static let besideOtherSuites = JobOptions(confirmWithin: .seconds(30))
}
