import Logging
import SkyJournal

/// Where the broker keeps its durable jobs, open: the journal's thread and what it held
/// unfinished at start. A state directory with a SQLite file (``StateDirectory``) or a
/// PostgreSQL store (``PostgresJournal``); the broker treats both alike.
protocol OpenedJournal: Sendable {
    var writer: JournalWriter { get }
    /// Jobs the journal held unfinished when it was opened.
    var unfinished: [JobRecord] { get }
    /// What it held besides jobs when it was opened: read before its jobs are taken up.
    var settings: JournalSettings { get }
    /// Commits what is queued, stops the journal's thread, and lets the next broker in.
    func close() async
    /// Yields once if the journal was lost to another broker (a shared store); the broker
    /// then stops. `nil` for a journal only this process can use.
    var lost: AsyncStream<JournalError>? { get }
    /// This broker's turn at a shared store (`nil` for a journal only this process can use).
    var epoch: Int64? { get }
    /// Tells standbys on a shared store how to name this broker (with the endpoints it bound).
    func announce(_ name: String) async
    /// On a shared store: given how long the broker's I/O thread did not run, whether the broker
    /// must step down (a standby may have taken over meanwhile); it is then told through
    /// ``lost``. `nil` for a journal only this process can use.
    var stallGuard: (@Sendable (Duration) -> Bool)? { get }
    /// On a shared store: whether the store answered lately (its lease renewed within a renewal
    /// and a half). While it does not, the broker hands no job to a worker: a standby that takes
    /// over would run the job again, since its outcome could not be written here. `nil` for a
    /// journal only this process can use.
    var storeAnswers: (@Sendable () -> Bool)? { get }
}

extension JournalWriter {
    /// Starts the journal's thread on the store `open` makes, reads what is unfinished, and
    /// logs where the store is (`named`: `file` or `store`) with its counts: a broker started on
    /// another journal than the operator meant (another directory, an empty database) shows it
    /// at once.
    static func startReading(
        named: (key: String, value: String), logger: Logger,
        open: @escaping @Sendable () throws(JournalError) -> any JobStore
    ) async throws(JournalError) -> (writer: JournalWriter, unfinished: [JobRecord], settings: JournalSettings) {
        let writer = try await JournalWriter.start(open: open)
        do {
            let (unfinished, jobs, settings) = try await writer.read { store throws(JournalError) in
                (
                    try store.unfinished(), try store.jobCount(),
                    JournalSettings(
                        paused: try store.pausedServices(), limits: try store.serviceLimits(),
                        totals: try store.totals())
                )
            }
            let paused = settings.paused
            logger.info(
                "journal open",
                metadata: [named.key: "\(named.value)", "jobs": "\(jobs)", "unfinished jobs": "\(unfinished.count)"])
            if !paused.isEmpty {
                logger.info(
                    "paused services",
                    metadata: [
                        "count": "\(paused.count)", "services": "\(paused.prefix(10))\(paused.count > 10 ? " …" : "")",
                    ])
            }
            if !settings.limits.isEmpty {
                // A per-key limit's row is named after its service with a suffix.
                let names = settings.limits.map { limit in
                    limit.name.hasSuffix(RateLimitBook.journalKeySuffix)
                        ? "\(limit.name.dropLast(RateLimitBook.journalKeySuffix.count)) (per key)" : limit.name
                }
                logger.info(
                    "rate limits set with skyctl, from the journal (--rate-limit flags apply besides)",
                    metadata: [
                        "count": "\(names.count)", "services": "\(names.prefix(10))\(names.count > 10 ? " …" : "")",
                    ])
            }
            return (writer, unfinished, settings)
        } catch {
            await writer.stop()
            throw error
        }
    }
}

/// What a journal held besides jobs when it was opened.
struct JournalSettings: Sendable {
    /// The services paused (their jobs wait).
    var paused: [String] = []
    /// The services' rate limits set through `mmi.limits.set`, each in the form written.
    var limits: [(name: String, limit: [UInt8])] = []
    /// The counts of jobs, counted on from there.
    var totals = JobTotals()
}
