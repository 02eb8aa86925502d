import Sky

extension JobOptions {
    /// For the suites' durable loads of thousands of submits, which test what becomes of jobs,
    /// not the submit's deadline: a fresh clone's CI run, a PostgreSQL contract suite writing
    /// beside them, once took more than the default 850 ms to commit a batch, and its submits
    /// failed with it (`journalUnavailable`, as documented).
    static let besideOtherSuites = JobOptions(confirmWithin: .seconds(30))
}
