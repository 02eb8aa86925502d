import SkyJournal

/// The job store on a PostgreSQL server (`skybroker --store postgresql://…`): the jobs live in
/// a database that the operator replicates, so that losing the broker's host or disk loses no
/// acknowledged job.
///
/// Why libpq (Debian's `libpq-dev`) through a thin wrapper (``PostgresConnection``) and not
/// postgres-nio: its calls block, which is what the journal's own thread wants (the store is
/// used by that one thread, as ``SQLiteJobStore`` is), where postgres-nio would bring SwiftNIO's
/// event loops as a second threading model and minutes of build; and libpq's connection string
/// takes several hosts and `target_session_attrs=read-write`, so that after PostgreSQL's own
/// failover the next connection reaches the new primary without Sky knowing the topology.
///
/// A transaction is durable when ``apply(_:)`` returns: committed with the server's
/// `synchronous_commit` (on by default: flushed on the primary, and on its synchronous
/// standbys when `synchronous_standby_names` names them).
///
/// One broker uses a store at a time: it holds a session advisory lock while it runs (freed by
/// the server when the broker's session ends, so a `kill -9` leaves no stale lock). A second
/// broker is refused at start, naming the store. A broker whose session was lost takes the lock
/// again on its next write; if another broker holds it, or held it meanwhile (the epoch in
/// `sky_lease` moved on), the store is lost to this broker and it stops.
public final class PostgresJobStore: JobStore {
    /// The schema version this build reads and writes; a store of a newer one is refused.
    public static let schemaVersion: Int64 = 1
    /// The advisory lock's key ("SkyJobs" in ASCII): brokers of one database share it.
    static let lockKey: Int64 = 0x0053_6B79_4A6F_6273

    /// The store's URI without its password, for errors and logs.
    public var store: String { connection.store }

    /// `uri` without its password: what errors and logs name.
    public static func redacted(_ uri: String) -> String { PostgresConnection.redacted(uri) }
    private let connection: PostgresConnection

    private static let columns =
        "id, service, body, priority, not_before, idempotency_key, state, attempt, outcome, expires_at, submitted_at, options"

    /// This broker's turn at the store: the epoch it set when it took the store (`sky_lease`).
    /// A session lost and made again finds the same epoch unless another broker took the store
    /// meanwhile, in which case this broker's jobs in memory may be stale.
    private var epoch: Int64 = 0
    /// Told, on the journal's thread, when the store was lost to another broker.
    private let lost: (@Sendable (JournalError) -> Void)?

    /// Connects, takes the store's lock, creates or checks the schema, and takes a new epoch.
    /// - Parameter lost: called (on the journal's thread) when a session made again after a
    ///   lost one finds that another broker holds the store, or held it meanwhile: this broker
    ///   must stop serving jobs (the broker stops, naming it).
    /// - Throws: ``JournalError/cannotConnect(store:reason:)``, ``JournalError/inUse(store:)``,
    ///   ``JournalError/newerSchema(store:found:known:)``, ``JournalError/corrupt(path:reason:)``
    ///   for a database with tables of the same names that Sky did not make.
    public init(uri: String, lost: (@Sendable (JournalError) -> Void)? = nil) throws(JournalError) {
        connection = try PostgresConnection(uri: uri)
        self.lost = lost
        connection.define("lock", "SELECT pg_try_advisory_lock($1)", types: [20])
        connection.define("epoch", "SELECT epoch FROM sky_lease", types: [])
        connection.define("new epoch", "UPDATE sky_lease SET epoch = epoch + 1 RETURNING epoch", types: [])
        try takeLock()
        try migrate()
        try connection.run("new epoch", []) { row in epoch = row.integer(0) }
        define()
        connection.onReconnect = { [unowned self] () throws(JournalError) in try self.takeBack() }
    }

    /// The session's advisory lock.
    private func takeLock() throws(JournalError) {
        var taken = false
        try connection.run("lock", [.integer(Self.lockKey)]) { row in taken = row.bytes(0) == [1] }
        guard taken else { throw .inUse(store: connection.store) }
    }

    /// After a lost session: the lock again, and the epoch unchanged. Another broker holding the
    /// store now, or having held it meanwhile, ends this broker's use of it.
    private func takeBack() throws(JournalError) {
        do throws(JournalError) {
            try takeLock()
            var found: Int64 = 0
            try connection.run("epoch", []) { row in found = row.integer(0) }
            guard found == epoch else { throw .fenced(store: connection.store) }
        } catch {
            if case .inUse = error { lost?(error) }
            if case .fenced = error { lost?(error) }
            throw error
        }
    }

    /// Creates the schema in an empty database, refuses a newer one or one Sky did not make.
    /// Brokers starting at once are serialised by a transaction-level lock.
    private func migrate() throws(JournalError) {
        connection.define(
            "tables",
            "SELECT to_regclass('sky_schema') IS NOT NULL, to_regclass('sky_jobs') IS NOT NULL, to_regclass('sky_lease') IS NOT NULL",
            types: [])
        connection.define("version", "SELECT max(version) FROM sky_schema", types: [])
        try connection.execute("BEGIN")
        do throws(JournalError) {
            try connection.execute("SELECT pg_advisory_xact_lock(\(Self.lockKey + 1))")
            var tables: [Bool] = []
            try connection.run("tables", []) { row in tables = (0..<3).map { row.bytes($0) == [1] } }
            if tables == [false, false, false] {
                try create()
            } else {
                guard tables == [true, true, true] else {
                    throw .corrupt(
                        path: connection.store,
                        reason:
                            "tables named like Sky's (sky_schema, sky_jobs, sky_lease) that Sky did not make: \(tables.map { $0 ? "present" : "missing" }.joined(separator: ", ")); give the broker a database of its own"
                    )
                }
                var found: Int64 = 0
                var type: UInt32 = 0
                try connection.run("version", []) { row in
                    found = row.integer(0)
                    type = row.type(0)
                }
                guard type == 20 else {
                    throw .corrupt(
                        path: connection.store,
                        reason: "its sky_schema table is not Sky's (its version is not a bigint)")
                }
                if found > Self.schemaVersion {
                    throw .newerSchema(store: connection.store, found: found, known: Self.schemaVersion)
                }
            }
            try connection.execute("COMMIT")
        } catch {
            try? connection.execute("ROLLBACK")
            throw error
        }
    }

    /// The tables of an empty database; a user that may not create them is told what to do.
    private func create() throws(JournalError) {
        do {
            try connection.execute(Self.version1)
        } catch .failed(_, let operation, let reason) where reason.contains("permission denied") {
            throw .failed(
                path: connection.store, operation: operation,
                reason:
                    "\(reason); this user may not create Sky's tables: grant it CREATE on the database's schema (GRANT CREATE ON SCHEMA public TO the user), or start the broker once as the database's owner"
            )
        }
    }

    /// The first schema: the same fields as the SQLite journal's, `seq` keeping submit order.
    private static let version1 = """
        CREATE TABLE sky_jobs (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            id bytea NOT NULL UNIQUE,
            service text NOT NULL,
            body bytea NOT NULL,
            priority bigint NOT NULL,
            not_before bigint NOT NULL,
            idempotency_key text UNIQUE,
            state bigint NOT NULL,
            attempt bigint NOT NULL,
            outcome bytea,
            expires_at bigint NOT NULL,
            submitted_at bigint NOT NULL,
            options bytea NOT NULL
        );
        CREATE INDEX sky_jobs_unfinished ON sky_jobs (seq) WHERE state < 2;
        CREATE INDEX sky_jobs_expiry ON sky_jobs (expires_at) WHERE state >= 2;
        CREATE TABLE sky_lease (epoch bigint NOT NULL);
        INSERT INTO sky_lease (epoch) VALUES (0);
        CREATE TABLE sky_schema (version bigint NOT NULL);
        INSERT INTO sky_schema (version) VALUES (1);
        """

    private func define() {
        let (integer, text, bytes) = (UInt32(20), UInt32(25), UInt32(17))
        connection.define("begin", "BEGIN", types: [])
        connection.define(
            "insert",
            "INSERT INTO sky_jobs (\(Self.columns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING",
            types: [bytes, text, bytes, integer, integer, text, integer, integer, bytes, integer, integer, bytes])
        // An outcome is recorded once: a job that already ended keeps its first.
        connection.define(
            "start", "UPDATE sky_jobs SET state = 1, attempt = $2 WHERE id = $1 AND state < 2", types: [bytes, integer])
        connection.define(
            "reschedule", "UPDATE sky_jobs SET state = 0, not_before = $2 WHERE id = $1 AND state < 2",
            types: [bytes, integer])
        connection.define(
            "release", "UPDATE sky_jobs SET state = 0, attempt = $2 WHERE id = $1 AND state < 2",
            types: [bytes, integer])
        connection.define(
            "finish", "UPDATE sky_jobs SET state = $2, outcome = $3, expires_at = $4 WHERE id = $1 AND state < 2",
            types: [bytes, integer, bytes, integer])
        connection.define("byID", "SELECT \(Self.columns) FROM sky_jobs WHERE id = $1", types: [bytes])
        connection.define("byKey", "SELECT \(Self.columns) FROM sky_jobs WHERE idempotency_key = $1", types: [text])
        connection.define("open", "SELECT \(Self.columns) FROM sky_jobs WHERE state < 2 ORDER BY seq", types: [])
        // $1 and $2 are NULL for "any"; newest first by submit order.
        connection.define(
            "listing",
            "SELECT \(Self.columns) FROM sky_jobs WHERE ($1::bigint IS NULL OR state = $1) AND ($2::text IS NULL OR service = $2) ORDER BY seq DESC LIMIT $3",
            types: [integer, text, integer])
        connection.define(
            "expire",
            "DELETE FROM sky_jobs WHERE seq IN (SELECT seq FROM sky_jobs WHERE state >= 2 AND expires_at < $1 LIMIT $2)",
            types: [integer, integer])
        connection.define("bytes", "SELECT pg_total_relation_size('sky_jobs')", types: [])
        connection.define("count", "SELECT count(*) FROM sky_jobs", types: [])
    }

    /// Writes `changes` in one transaction. A session lost before COMMIT was sent (the server
    /// restarted, or PostgreSQL failed over to another host) committed nothing: the transaction
    /// is run once more on a new session. A session lost during COMMIT leaves its outcome
    /// unknown: the error reaches the submitters, whose idempotency keys make a retry safe.
    @discardableResult
    public func apply(_ changes: [JobChange]) throws(JournalError) -> JournalReceipt {
        guard !changes.isEmpty else { return JournalReceipt() }
        var committing = false
        do {
            return try transaction(changes, committing: &committing)
        } catch .cannotConnect where !committing {
            return try transaction(changes, committing: &committing)
        }
    }

    private func transaction(_ changes: [JobChange], committing: inout Bool) throws(JournalError) -> JournalReceipt {
        var receipt = JournalReceipt()
        // BEGIN and every change in one round trip (a few for a large batch), then COMMIT in
        // its own: whether COMMIT was sent is what says if a lost session committed nothing.
        let calls = [("begin", [PostgresConnection.Value]())] + changes.map(Self.call)
        do {
            let counts = try connection.runPipelined(calls)
            for (change, written) in zip(changes, counts.dropFirst()) {
                guard case .submitted(let job) = change, written == 0, let key = job.idempotencyKey else { continue }
                // Its key is taken: the answer names the first job.
                if let first = try self.job(idempotencyKey: key), first.id != job.id {
                    receipt.duplicates[job.id] = first
                }
            }
            committing = true
            try connection.execute("COMMIT")
        } catch {
            if !committing { try? connection.execute("ROLLBACK") }
            throw error
        }
        return receipt
    }

    /// The statement that records `change`, with its parameters.
    private static func call(_ change: JobChange) -> (String, [PostgresConnection.Value]) {
        switch change {
        case .submitted(let job):
            (
                "insert",
                [
                    .bytes(job.id), .text(job.service), .bytes(job.body), .integer(Int64(job.priority)),
                    .integer(job.notBefore), job.idempotencyKey.map { .text($0) } ?? .null,
                    .integer(job.state.rawValue), .integer(Int64(job.attempt)), job.outcome.map { .bytes($0) } ?? .null,
                    .integer(job.expiresAt), .integer(job.submittedAt), .bytes(job.options),
                ]
            )
        case .started(let id, let attempt): ("start", [.bytes(id), .integer(Int64(attempt))])
        case .released(let id, let attempt): ("release", [.bytes(id), .integer(Int64(attempt))])
        case .rescheduled(let id, let notBefore): ("reschedule", [.bytes(id), .integer(notBefore)])
        case .finished(let id, let state, let outcome, let expiresAt):
            (
                "finish",
                [.bytes(id), .integer(state.rawValue), outcome.map { .bytes($0) } ?? .null, .integer(expiresAt)]
            )
        }
    }

    public func list(state: JobRecord.State?, service: String?, limit: Int) throws(JournalError) -> [JobRecord] {
        try records(
            "listing",
            [
                state.map { .integer($0.rawValue) } ?? .null, service.map { .text($0) } ?? .null,
                .integer(Int64(max(0, limit))),
            ])
    }

    public func unfinished() throws(JournalError) -> [JobRecord] {
        try records("open", [])
    }

    public func job(_ id: [UInt8]) throws(JournalError) -> JobRecord? {
        try records("byID", [.bytes(id)]).first
    }

    public func job(idempotencyKey: String) throws(JournalError) -> JobRecord? {
        try records("byKey", [.text(idempotencyKey)]).first
    }

    public func deleteExpired(before now: Int64, limit: Int) throws(JournalError) -> Int {
        try connection.run("expire", [.integer(now), .integer(Int64(limit))])
    }

    public func byteCount() throws(JournalError) -> Int {
        try count("bytes")
    }

    public func jobCount() throws(JournalError) -> Int {
        try count("count")
    }

    private func count(_ statement: String) throws(JournalError) -> Int {
        var value: Int64 = 0
        try connection.run(statement, []) { row in value = row.integer(0) }
        return Int(value)
    }

    private func records(_ statement: String, _ parameters: [PostgresConnection.Value]) throws(JournalError)
        -> [JobRecord]
    {
        var jobs: [JobRecord] = []
        try connection.run(statement, parameters) { row throws(JournalError) in jobs.append(try record(row)) }
        return jobs
    }

    private func record(_ row: PostgresConnection.Row) throws(JournalError) -> JobRecord {
        guard let id = row.bytes(0), let service = row.text(1), let body = row.bytes(2),
            let state = JobRecord.State(rawValue: row.integer(6))
        else {
            throw .corrupt(path: connection.store, reason: "a job row with a missing id, service, body or state")
        }
        return JobRecord(
            id: id, service: service, body: body, priority: Int(row.integer(3)), notBefore: row.integer(4),
            idempotencyKey: row.text(5), state: state, attempt: Int(row.integer(7)), outcome: row.bytes(8),
            expiresAt: row.integer(9), submittedAt: row.integer(10), options: row.bytes(11) ?? [])
    }
}
