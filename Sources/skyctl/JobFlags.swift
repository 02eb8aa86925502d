import ArgumentParser
import Sky
import SkyCLISupport
import SkyProtocol

/// The flags of a job's options that `skyctl jobs submit` and `skyctl schedules add` both take,
/// checked and read in one place.
struct JobFlags: ParsableArguments {
    // Unconditional: `--priority -1` is a value, not a flag.
    @Option(
        parsing: .unconditional,
        help: "The job's priority, -128 to 127 (higher first among waiting jobs of its service).")
    var priority = 0

    @Option(parsing: .unconditional, help: "How long one attempt of the job may run, in seconds (none by default).")
    var timeout: Double?

    @Option(parsing: .unconditional, help: "Attempts (1 to 1000; a timed-out attempt is tried again after a backoff).")
    var maxAttempts = RetryPolicy.default.maxAttempts

    @Option(parsing: .unconditional, help: "How long the job's outcome is kept after it ended, in seconds.")
    var retention: Double = 86_400

    @Option(
        help:
            "The key (a customer, a tenant) whose jobs take turns with other keys' jobs of the service and share --concurrency-limit."
    )
    var concurrencyKey: String?

    @Option(
        parsing: .unconditional, help: "At most this many jobs of --concurrency-key run at once (1 to 1000000).")
    var concurrencyLimit: Int?

    func validate() throws {
        try FlagCheck.integer(priority, "--priority", in: Int(Int8.min)...Int(Int8.max))
        if let timeout { try FlagCheck.seconds(timeout, "--timeout", in: 0.001...4_000_000) }
        try FlagCheck.integer(maxAttempts, "--max-attempts", in: 1...1000)
        try FlagCheck.seconds(retention, "--retention", in: 1...315_360_000)
        try Self.checkConcurrency(key: concurrencyKey, limit: concurrencyLimit, of: "jobs")
    }

    /// Checks `--concurrency-key` and `--concurrency-limit`, of jobs or of calls.
    static func checkConcurrency(key: String?, limit: Int?, of work: String) throws {
        if let key, let problem = WireFormat.nameProblem(key, what: "--concurrency-key") {
            throw ValidationError(problem)
        }
        guard let limit else { return }
        guard key != nil else {
            throw ValidationError("--concurrency-limit limits the \(work) of a key: give --concurrency-key")
        }
        try FlagCheck.integer(limit, "--concurrency-limit", in: 1...Int(JobSubmission.maxConcurrencyLimit))
    }

    /// The options these flags set, on top of `base`.
    func options(_ base: JobOptions = JobOptions()) -> JobOptions {
        var options = base
        options.priority = JobPriority(rawValue: Int8(priority))
        options.retention = FlagCheck.duration(seconds: retention)
        options.timeout = timeout.map(FlagCheck.duration(seconds:))
        options.retry.maxAttempts = maxAttempts
        options.concurrencyKey = concurrencyKey
        options.concurrencyLimit = concurrencyLimit
        return options
    }
}
