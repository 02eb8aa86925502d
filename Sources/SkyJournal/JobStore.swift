/// Where the broker keeps durable jobs. The embedded default is ``SQLiteJobStore``; a shared
/// server store (for a standby broker) can conform later without the broker changing.
///
/// A store is used by one thread (the journal's writer); it need not be `Sendable`.
public protocol JobStore {
    /// Writes `changes` in one transaction and makes them durable (fsync) before returning.
    /// - Returns: the submits whose idempotency key was taken, with the job that holds it.
    @discardableResult
    func apply(_ changes: [JobChange]) throws(JournalError) -> JournalReceipt

    /// Every queued or running job, oldest first: what the broker queues again when it starts.
    func unfinished() throws(JournalError) -> [JobRecord]

    func job(_ id: [UInt8]) throws(JournalError) -> JobRecord?

    func job(idempotencyKey: String) throws(JournalError) -> JobRecord?

    /// The jobs that hold these idempotency keys, in no order (a key no job holds is left
    /// out): a flow's steps, read at once when the broker takes the flow up again.
    func jobs(idempotencyKeys: [String]) throws(JournalError) -> [JobRecord]

    /// Up to `limit` jobs, newest first, of one state (or any) and one service (or any).
    func list(state: JobRecord.State?, service: String?, limit: Int) throws(JournalError) -> [JobRecord]

    /// How many jobs ``list(state:service:limit:)`` would find without a limit, counted up to
    /// `atMost` (a listing's "of how many", bounded so that a count of millions costs no more
    /// than `atMost` rows).
    func count(state: JobRecord.State?, service: String?, atMost: Int) throws(JournalError) -> Int

    /// Up to `limit` jobs that match `selection`, oldest first, after the one numbered `after`
    /// (0 for the first page; the next page starts after the last one's ``JobMatch/seq``):
    /// what a bulk action acts on.
    func select(_ selection: JobSelection, after: Int64, limit: Int) throws(JournalError) -> [JobMatch]

    /// Deletes at most `limit` finished jobs that expired before `now`; returns how many.
    func deleteExpired(before now: Int64, limit: Int) throws(JournalError) -> Int

    /// The bytes the store takes on disk now.
    func byteCount() throws(JournalError) -> Int

    /// Jobs the store holds, ended ones within their retention included: logged at start, so
    /// that a broker started on the wrong (or an empty) journal shows it at once.
    func jobCount() throws(JournalError) -> Int

    /// Every schedule, by name: what the broker fires from when it starts.
    func schedules() throws(JournalError) -> [ScheduleRecord]

    /// The services paused (``JobChange/servicePaused(name:paused:)``), by name: read before the
    /// broker takes up its unfinished jobs, so that none of theirs starts.
    func pausedServices() throws(JournalError) -> [String]

    /// The services' rate limits (``JobChange/serviceLimited(name:limit:)``), by name, each in
    /// the form it was written in.
    func serviceLimits() throws(JournalError) -> [(name: String, limit: [UInt8])]

    /// The counts of jobs last saved (``JobChange/totalsSaved(_:)``); zeros if none were.
    func totals() throws(JournalError) -> JobTotals
}

extension JobStore {
    /// One lookup a key: for a store whose lookups cost no round trip.
    public func jobs(idempotencyKeys: [String]) throws(JournalError) -> [JobRecord] {
        var found: [JobRecord] = []
        for key in idempotencyKeys {
            if let job = try job(idempotencyKey: key) { found.append(job) }
        }
        return found
    }
}
