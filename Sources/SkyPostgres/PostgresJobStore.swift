import Foundation
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
/// One broker is active on a store at a time: it holds a session advisory lock while it runs
/// (freed by the server when the broker's session ends, so a `kill -9` leaves no stale lock) and
/// the lease in `sky_lease`: an epoch it took when it became active, renewed by every
/// transaction and at least every ``Standby/renewEvery``. Other brokers wait as standbys
/// (``Standby``): they take the lock once it is freed, and end the session of an active broker
/// whose lease was not renewed for ``Standby/lapseAfter`` (frozen, cut off, or its host gone
/// while the server still sees its connection). Every transaction first checks the epoch: a
/// broker that wakes up after another took the store writes nothing and stops.
public final class PostgresJobStore: JobStore {
    /// The schema version this build reads and writes; a store of a newer one is refused, an
    /// older one is brought up to it (docs/jobs.md, "Schema versions").
    public static let schemaVersion: Int64 = 7
    /// The advisory lock's key ("SkyJobs" in ASCII): brokers of one database share it.
    static let lockKey: Int64 = 0x0053_6B79_4A6F_6273

    /// The store's URI without its password, for errors and logs.
    public var store: String { connection.store }

    /// `uri` without its password: what errors and logs name.
    public static func redacted(_ uri: String) -> String { PostgresConnection.redacted(uri) }
    private let connection: PostgresConnection

    /// Each session plans every statement for the values it is given (a plan cached once the
    /// table was small, a join by hash over all of it, stayed when it had grown: half of the
    /// throughput here) and prices a page read as memory does (the queue's rows and indexes are
    /// hot), so that a batch's changes find their rows through the index on `id`.
    static let sessionSettings = "SET plan_cache_mode = force_custom_plan; SET random_page_cost = 1.1"

    private static let columns =
        "id, service, body, priority, not_before, idempotency_key, state, attempt, outcome, expires_at, submitted_at, options"
    /// What an insert writes: ``columns``, and the times a job that is kept as it runs or
    /// after it ended (a call its caller left) starts with.
    private static let insertColumns = columns + ", started_at, ended_at"
    /// What a read takes: ``insertColumns``, and an outcome's progress.
    private static let readColumns = insertColumns + ", progress"

    /// This broker's turn at the store: the epoch it set when it took the store (`sky_lease`).
    /// A session lost and made again finds the same epoch unless another broker took the store
    /// meanwhile, in which case this broker's jobs in memory may be stale.
    private var epoch: Int64 = 0
    /// Told, on the journal's thread, when the store was lost to another broker.
    private let lost: (@Sendable (JournalError) -> Void)?
    /// Another broker took the store: nothing more is sent to the server.
    private var fencedOut = false
    /// Told (on the journal's thread) each time the lease was renewed and committed.
    private let renewed: (@Sendable () -> Void)?

    /// The epoch this broker took when it became active: every event and log of its run names it.
    public var currentEpoch: Int64 { epoch }

    /// Connects, takes the store's lock (waiting for it as a standby if `standby` is given),
    /// creates, migrates or checks the schema, and takes a new epoch.
    /// - Parameters:
    ///   - standby: how to wait while another broker is active; `nil` refuses at once with
    ///     ``JournalError/inUse(store:)``.
    ///   - lost: called (on the journal's thread) once this broker learns that another took the
    ///     store (a newer epoch, or the lock held by another after a lost session): this broker
    ///     must stop serving jobs (the broker stops, naming it).
    /// - Throws: ``JournalError/cannotConnect(store:reason:)``, ``JournalError/inUse(store:)``,
    ///   ``JournalError/newerSchema(store:found:known:)``, ``JournalError/corrupt(path:reason:)``
    ///   for a database with tables of the same names that Sky did not make.
    public init(
        uri: String, standby: Standby? = nil, lost: (@Sendable (JournalError) -> Void)? = nil,
        renewed: (@Sendable () -> Void)? = nil
    ) throws(JournalError) {
        // Without a standby's settings, the default `--takeover-after`'s bound; 1 s at least,
        // since a loaded server may well be silent for a fifth of a second (a short
        // `--takeover-after` still steps down at its own time: that is the journal's watchdog).
        connection = try PostgresConnection(
            uri: uri, silenceBound: max(.seconds(1), (standby ?? Standby(name: "")).stepDownAfter),
            setup: Self.sessionSettings)
        self.lost = lost
        self.renewed = renewed
        connection.define("lock", "SELECT pg_try_advisory_lock($1)", types: [20])
        connection.define("holder", Self.holderQuery, types: [])
        connection.define(
            "evict",
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid::bigint = \(Self.lockKey >> 32) AND objid::bigint = \(Self.lockKey & 0xFFFF_FFFF) AND objsubid = 1 AND pid = $1",
            types: [20])
        connection.define(
            "new epoch",
            "UPDATE sky_lease SET epoch = epoch + 1, holder = $1, holder_pid = pg_backend_pid(), renewed_at = now(), takeover_after_ms = $2 RETURNING epoch",
            types: [25, 20])
        connection.define(
            "take back", "UPDATE sky_lease SET holder_pid = pg_backend_pid(), renewed_at = now() WHERE epoch = $1",
            types: [20])
        connection.define("rename", "UPDATE sky_lease SET holder = $1 WHERE epoch = $2", types: [25, 20])
        // Renews the lease, and fences: a broker whose epoch is no longer the store's changes nothing.
        connection.define("fence", "UPDATE sky_lease SET renewed_at = now() WHERE epoch = $1", types: [20])
        connection.define(
            "renew",
            "UPDATE sky_lease SET renewed_at = now() WHERE epoch = $1 RETURNING (SELECT string_agg(name, E'\\n') FROM sky_standbys WHERE seen_at > now() - interval '5 seconds')",
            types: [20])
        connection.define(
            "standing by",
            "INSERT INTO sky_standbys (name, seen_at) VALUES ($1, now()) ON CONFLICT (name) DO UPDATE SET seen_at = now()",
            types: [25])
        // Its own row goes, and those of standbys gone long ago (killed while they waited).
        connection.define(
            "active", "DELETE FROM sky_standbys WHERE name = $1 OR seen_at < now() - interval '1 hour'", types: [25])
        connection.define("leave", "DELETE FROM sky_standbys WHERE name = $1", types: [25])
        if let standby {
            try waitForLock(standby)
        } else {
            try takeLock()
        }
        try migrate()
        let takeoverAfter = (standby?.takeoverAfter ?? .seconds(5)).components
        let milliseconds = takeoverAfter.seconds * 1000 + takeoverAfter.attoseconds / 1_000_000_000_000_000
        try connection.run("new epoch", [.text(standby?.name ?? ""), .integer(milliseconds)]) { row in
            epoch = row.integer(0)
        }
        if let standby { try connection.run("active", [.text(standby.name)]) }
        define()
        connection.onReconnect = { [unowned self] () throws(JournalError) in try self.takeBack() }
    }

    /// Tries the session's advisory lock once.
    private func tryLock() throws(JournalError) -> Bool {
        var taken = false
        try connection.run("lock", [.integer(Self.lockKey)]) { row in taken = row.bytes(0) == [1] }
        return taken
    }

    /// The session's advisory lock, or ``JournalError/inUse(store:)``.
    private func takeLock() throws(JournalError) {
        guard try tryLock() else { throw .inUse(store: connection.store) }
    }

    /// Waits as a standby until the lock is this broker's: freed when the active broker's
    /// session ends, or freed here by ending that session once its lease lapsed.
    private func waitForLock(_ standby: Standby) throws(JournalError) {
        var seen: Lease?
        var reachable = true
        var reported: (epoch: Int64, ended: Bool)?
        var polls = 0
        while true {
            if standby.stop() {
                // So that the active broker, cut off from the store, does not count on it.
                _ = try? connection.run("leave", [.text(standby.name)])
                throw .stoppedWaiting(store: connection.store)
            }
            do {
                if try tryLock() { return }
                reachable = true
            } catch .cannotConnect(let store, let reason) {
                // The server restarted or failed over: a standby waits on (its next try connects
                // again); an unreachable server at start was refused before the wait.
                if reachable { standby.unreachable(.cannotConnect(store: store, reason: reason)) }
                reachable = false
                Thread.sleep(forTimeInterval: standby.poll.inSecondsForSleep)
                continue
            }
            guard standby.mayWait else { throw .inUse(store: store) }
            // Said about once a second, so that the active broker knows a standby waits: cut off
            // from the store, it then steps down for it (a store of schema 1 has no such table).
            if polls % 5 == 0 { _ = try? connection.run("standing by", [.text(standby.name)]) }
            polls += 1
            let lease = try? currentLease()
            if let lease, lease.epoch != seen?.epoch || lease.holder != seen?.holder {
                standby.waiting(lease)
            }
            seen = lease ?? seen
            if let lease, lease.silence > Standby.lapse(of: lease.takeoverAfter), lease.holderSession != 0 {
                var ended = false
                _ = try? connection.run("evict", [.integer(Int64(lease.holderSession))]) { row in
                    ended = row.bytes(0) == [1]
                }
                // Said once per epoch and outcome, not at every poll: a server process that does
                // not end when told (it hangs) keeps the lock until it does.
                if reported?.epoch != lease.epoch || reported?.ended != ended { standby.evicted(lease, ended) }
                reported = (lease.epoch, ended)
            }
            Thread.sleep(forTimeInterval: standby.poll.inSecondsForSleep)
        }
    }

    /// The lease as the store holds it now (`nil` from a store without one yet: a new database,
    /// or schema version 1, whose brokers renew nothing).
    private func currentLease() throws(JournalError) -> Lease? {
        var lease: Lease?
        try connection.run("holder", []) { row in
            lease = Lease(
                epoch: row.integer(0), holder: row.text(1) ?? "",
                holderSession: Int32(truncatingIfNeeded: row.integer(2)),
                silence: .milliseconds(row.integer(3)), takeoverAfter: .milliseconds(row.integer(4)))
        }
        return lease
    }

    /// The lease row, with how long ago it was renewed by the server's clock (the brokers'
    /// clocks need not agree).
    private static let holderQuery =
        "SELECT epoch, holder, holder_pid, (extract(epoch FROM now() - renewed_at) * 1000)::bigint, takeover_after_ms FROM sky_lease"

    /// After a lost session: the lock again, and the epoch unchanged. Another broker holding the
    /// store now, or having held it meanwhile, ends this broker's use of it.
    private func takeBack() throws(JournalError) {
        var taken = try tryLock()
        // This broker's previous session may hold the lock still: given up on a silent server,
        // its server process has not seen the connection close yet. With the epoch still this
        // broker's, no other took the store: that session is ended, as a standby ends a lapsed
        // one, and the lock tried again for up to a second.
        if !taken, let lease = try currentLease(), lease.epoch == epoch, lease.holderSession != 0 {
            _ = try connection.run("evict", [.integer(Int64(lease.holderSession))])
            for _ in 0..<10 where !taken {
                Thread.sleep(forTimeInterval: 0.1)
                taken = try tryLock()
            }
        }
        // Another broker holding the lock now, or a newer epoch, means one took the store.
        guard taken, try connection.run("take back", [.integer(epoch)]) == 1 else { throw fenceOut() }
    }

    /// Names this broker in the lease anew (once it knows the endpoints it bound).
    public func rename(_ holder: String) throws(JournalError) {
        try checkNotFenced()
        guard try connection.run("rename", [.text(holder), .integer(epoch)]) == 1 else { throw fenceOut() }
    }

    /// Renews the lease (the broker calls it every ``Standby/renewEvery``) and returns the names
    /// (``Standby/name``) of the standbys that said in the last 5 s that they wait; a newer
    /// epoch in the store ends this broker's use of it.
    @discardableResult
    public func renewLease() throws(JournalError) -> [String] {
        try checkNotFenced()
        var standbys: [String] = []
        guard
            try connection.run(
                "renew", [.integer(epoch)],
                row: { row in standbys = row.text(0)?.split(separator: "\n").map(String.init) ?? [] }) == 1
        else {
            throw fenceOut()
        }
        renewed?()
        return standbys
    }

    /// Another broker took the store: this one is told (once) and uses it no more.
    private func fenceOut() -> JournalError {
        let error = JournalError.fenced(store: connection.store)
        if !fencedOut { lost?(error) }
        fencedOut = true
        return error
    }

    private func checkNotFenced() throws(JournalError) {
        if fencedOut { throw .fenced(store: connection.store) }
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
                if found < 2 { try connection.execute(Self.version2) }
                if found < 3 { try connection.execute(Self.version3) }
                if found < 4 { try connection.execute(Self.version4) }
                if found < 5 { try connection.execute(Self.version5) }
                if found < 6 { try connection.execute(Self.version6) }
                if found < 7 { try connection.execute(Self.version7) }
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
            try connection.execute(Self.version2)
            try connection.execute(Self.version3)
            try connection.execute(Self.version4)
            try connection.execute(Self.version5)
            try connection.execute(Self.version6)
            try connection.execute(Self.version7)
        } catch .failed(_, let operation, let reason) where reason.contains("permission denied") {
            throw .failed(
                path: connection.store, operation: operation,
                reason:
                    "\(reason); this user may not create Sky's tables: grant it CREATE on the database's schema (GRANT CREATE ON SCHEMA public TO the user), or start the broker once as the database's owner"
            )
        }
    }

    /// The first schema: the same fields as the SQLite journal's, `seq` keeping submit order.
    static let version1 = """
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

    /// Version 2: the lease names its holder and when it was renewed, so that a standby can
    /// tell a silent active broker; standbys say that they wait, so that an active broker cut
    /// off from the store knows to step down.
    private static let version2 = """
        ALTER TABLE sky_lease
            ADD COLUMN holder text NOT NULL DEFAULT '',
            ADD COLUMN holder_pid bigint NOT NULL DEFAULT 0,
            ADD COLUMN renewed_at timestamptz NOT NULL DEFAULT now(),
            ADD COLUMN takeover_after_ms bigint NOT NULL DEFAULT 5000;
        CREATE TABLE sky_standbys (name text PRIMARY KEY, seen_at timestamptz NOT NULL);
        UPDATE sky_schema SET version = 2;
        """

    /// Version 3: schedules, each tick recorded with the job it made.
    private static let version3 = """
        CREATE TABLE sky_schedules (name text PRIMARY KEY, spec bytea NOT NULL, next_fire bigint NOT NULL, last_job bytea);
        UPDATE sky_schema SET version = 3;
        """

    /// Version 4: paused services, whose work waits until they are resumed.
    private static let version4 = """
        CREATE TABLE sky_paused_services (name text PRIMARY KEY);
        UPDATE sky_schema SET version = 4;
        """

    /// Version 5: services' rate limits, each in the form the broker wrote.
    private static let version5 = """
        CREATE TABLE sky_service_limits (name text PRIMARY KEY, spec bytea NOT NULL);
        UPDATE sky_schema SET version = 5;
        """

    /// Version 6: when a job's last attempt started and when it ended, recorded with its
    /// outcome (0: unknown, as for jobs that ended before).
    private static let version6 = """
        ALTER TABLE sky_jobs
            ADD COLUMN started_at bigint NOT NULL DEFAULT 0,
            ADD COLUMN ended_at bigint NOT NULL DEFAULT 0;
        UPDATE sky_schema SET version = 6;
        """

    /// Version 7: what a job's handlers reported of their progress, and their last log lines,
    /// recorded with its outcome (NULL: none, as for jobs that ended before); the brokers' counts
    /// of jobs (one row, zeros until the first save).
    private static let version7 = """
        ALTER TABLE sky_jobs ADD COLUMN progress bytea;
        CREATE TABLE sky_totals (
            id int PRIMARY KEY CHECK (id = 1),
            submitted bigint NOT NULL,
            succeeded bigint NOT NULL,
            failed bigint NOT NULL,
            cancelled bigint NOT NULL,
            retried bigint NOT NULL
        );
        UPDATE sky_schema SET version = 7;
        """

    private func define() {
        let (integer, text, bytes) = (UInt32(20), UInt32(25), UInt32(17))
        connection.define("begin", "BEGIN", types: [])
        let (integers, texts, byteses) = (
            PostgresConnection.Value.arrayType(of: integer), PostgresConnection.Value.arrayType(of: text),
            PostgresConnection.Value.arrayType(of: bytes)
        )
        // Each statement takes the values of many changes as arrays, one row of `unnest` a
        // change: a transaction's statements are a few whatever its size, not one a change
        // (starting and ending a statement a change was a large part of the server's work). Each
        // also has a form for one change (" one"), which a lone submit takes: planned in a
        // fraction of the time. Inserted in the arrays' order, which `seq` keeps.
        connection.define(
            "insert one",
            "INSERT INTO sky_jobs (\(Self.insertColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING",
            types: [
                bytes, text, bytes, integer, integer, text, integer, integer, bytes, integer, integer, bytes, integer,
                integer,
            ])
        connection.define(
            "insert",
            """
            INSERT INTO sky_jobs (\(Self.insertColumns))
            SELECT \(Self.insertColumns) FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[],
                $6::text[], $7::bigint[], $8::bigint[], $9::bytea[], $10::bigint[], $11::bigint[], $12::bytea[],
                $13::bigint[], $14::bigint[])
                WITH ORDINALITY AS given (\(Self.insertColumns), n)
            ORDER BY n ON CONFLICT DO NOTHING
            """,
            types: [
                byteses, texts, byteses, integers, integers, texts, integers, integers, byteses, integers, integers,
                byteses, integers, integers,
            ])
        // An outcome is recorded once: a job that already ended keeps its first.
        // `set` names the given values `given.<column>`; the form for one change takes them as
        // $2, $3, … in `columns`' order (the job's id is $1).
        func update(_ name: String, set: String, columns: [String], types: [UInt32]) {
            let arrays = types.enumerated().map {
                "$\($0.offset + 1)::\($0.element == integers ? "bigint" : "bytea")[]"
            }
            connection.define(
                name,
                "UPDATE sky_jobs AS job SET \(set) FROM unnest(\(arrays.joined(separator: ", "))) AS given (\((["id"] + columns).joined(separator: ", "))) WHERE job.id = given.id AND job.state < 2",
                types: types)
            let one = columns.enumerated().reduce(set) {
                $0.replacingOccurrences(of: "given.\($1.element)", with: "$\($1.offset + 2)")
            }
            connection.define(
                name + " one", "UPDATE sky_jobs SET \(one) WHERE id = $1 AND state < 2",
                types: types.map { $0 == integers ? integer : bytes })
        }
        update("start", set: "state = 1, attempt = given.attempt", columns: ["attempt"], types: [byteses, integers])
        update("release", set: "state = 0, attempt = given.attempt", columns: ["attempt"], types: [byteses, integers])
        update("release key", set: "idempotency_key = NULL", columns: [], types: [byteses])
        // Whatever the job's state: a key held for a time that passed.
        connection.define(
            "expire key", "UPDATE sky_jobs SET idempotency_key = NULL WHERE id = ANY($1::bytea[])", types: [byteses])
        connection.define("expire key one", "UPDATE sky_jobs SET idempotency_key = NULL WHERE id = $1", types: [bytes])
        // An ended job only (a flow's step, kept as long as its flow).
        connection.define(
            "retain",
            "UPDATE sky_jobs AS job SET expires_at = given.expires_at FROM unnest($1::bytea[], $2::bigint[]) AS given (id, expires_at) WHERE job.id = given.id AND job.state >= 2",
            types: [byteses, integers])
        connection.define(
            "retain one", "UPDATE sky_jobs SET expires_at = $2 WHERE id = $1 AND state >= 2", types: [bytes, integer])
        connection.define("delete", "DELETE FROM sky_jobs WHERE id = ANY($1::bytea[]) AND state >= 2", types: [byteses])
        connection.define("delete one", "DELETE FROM sky_jobs WHERE id = $1 AND state >= 2", types: [bytes])
        update(
            "reschedule", set: "state = 0, not_before = given.not_before", columns: ["not_before"],
            types: [byteses, integers])
        update(
            "finish",
            set:
                "state = given.state, outcome = given.outcome, expires_at = given.expires_at, started_at = given.started_at, ended_at = given.ended_at, progress = given.progress",
            columns: ["state", "outcome", "expires_at", "started_at", "ended_at", "progress"],
            types: [byteses, integers, byteses, integers, integers, integers, byteses])
        connection.define("byID", "SELECT \(Self.readColumns) FROM sky_jobs WHERE id = $1", types: [bytes])
        connection.define(
            "byKey", "SELECT \(Self.readColumns) FROM sky_jobs WHERE idempotency_key = $1", types: [text])
        connection.define(
            "byKeys", "SELECT \(Self.readColumns) FROM sky_jobs WHERE idempotency_key = ANY($1::text[])",
            types: [texts])
        connection.define("open", "SELECT \(Self.readColumns) FROM sky_jobs WHERE state < 2 ORDER BY seq", types: [])
        // $1 and $2 are NULL for "any"; newest first by submit order.
        connection.define(
            "listing",
            "SELECT \(Self.readColumns) FROM sky_jobs WHERE ($1::bigint IS NULL OR state = $1) AND ($2::text IS NULL OR service = $2) ORDER BY seq DESC LIMIT $3",
            types: [integer, text, integer])
        // The earliest first, along the expiry index: without an order, a plan made while the
        // statistics were stale scanned the whole table for the few rows due, every second.
        connection.define(
            "expire",
            "DELETE FROM sky_jobs WHERE seq IN (SELECT seq FROM sky_jobs WHERE state >= 2 AND expires_at < $1 ORDER BY expires_at LIMIT $2)",
            types: [integer, integer])
        // Rare beside jobs' changes: one statement each, in the transaction's order.
        connection.define(
            "save schedule",
            "INSERT INTO sky_schedules (name, spec, next_fire) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, next_fire = excluded.next_fire",
            types: [text, bytes, integer])
        connection.define(
            "advance schedule",
            "UPDATE sky_schedules SET next_fire = $2, last_job = coalesce($3, last_job) WHERE name = $1",
            types: [text, integer, bytes])
        connection.define("remove schedule", "DELETE FROM sky_schedules WHERE name = $1", types: [text])
        connection.define(
            "schedules", "SELECT name, spec, next_fire, last_job FROM sky_schedules ORDER BY name", types: [])
        connection.define(
            "pause service", "INSERT INTO sky_paused_services (name) VALUES ($1) ON CONFLICT DO NOTHING", types: [text])
        connection.define("resume service", "DELETE FROM sky_paused_services WHERE name = $1", types: [text])
        connection.define("paused services", "SELECT name FROM sky_paused_services ORDER BY name", types: [])
        connection.define(
            "limit service",
            "INSERT INTO sky_service_limits (name, spec) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec",
            types: [text, bytes])
        connection.define("unlimit service", "DELETE FROM sky_service_limits WHERE name = $1", types: [text])
        connection.define("service limits", "SELECT name, spec FROM sky_service_limits ORDER BY name", types: [])
        connection.define(
            "save totals",
            "INSERT INTO sky_totals (id, submitted, succeeded, failed, cancelled, retried) VALUES (1, $1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET submitted = excluded.submitted, succeeded = excluded.succeeded, failed = excluded.failed, cancelled = excluded.cancelled, retried = excluded.retried",
            types: [integer, integer, integer, integer, integer])
        connection.define(
            "totals", "SELECT submitted, succeeded, failed, cancelled, retried FROM sky_totals", types: [])
        // On disk, with its indexes: deleted rows' space is reused, not returned (VACUUM FULL
        // returns it). A table with no row counts none, so that one emptied is not over a limit.
        connection.define(
            "bytes",
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM sky_jobs) THEN pg_total_relation_size('sky_jobs') ELSE 0 END",
            types: [])
        connection.define("count", "SELECT count(*) FROM sky_jobs", types: [])
        connection.define(
            "matching",
            "SELECT count(*) FROM (SELECT 1 FROM sky_jobs WHERE ($1::bigint IS NULL OR state = $1) AND ($2::text IS NULL OR service = $2) LIMIT $3) AS found",
            types: [integer, text, integer])
        // A failed or cancelled job's outcome only: the others' are results, maybe large.
        connection.define(
            "select",
            "SELECT seq, id, state, service, idempotency_key, CASE WHEN state >= 3 THEN outcome END FROM sky_jobs WHERE seq > $5 AND ($1::bigint IS NULL OR state = $1) AND ($2::text IS NULL OR service = $2) AND ($3::bigint IS NULL OR submitted_at >= $3) AND ($4::bigint IS NULL OR submitted_at < $4) ORDER BY seq LIMIT $6",
            types: [integer, text, integer, integer, integer, integer])
    }

    /// Writes `changes` in one transaction. A session lost before COMMIT was sent (the server
    /// restarted, or PostgreSQL failed over to another host) committed nothing: the transaction
    /// is run once more on a new session, unless the server was found unreachable after a wait
    /// (a session given up on a silent server: the next would most likely wait as long). A
    /// session lost during COMMIT leaves its outcome unknown: the error reaches the submitters,
    /// whose idempotency keys make a retry safe.
    @discardableResult
    public func apply(_ changes: [JobChange]) throws(JournalError) -> JournalReceipt {
        guard !changes.isEmpty else { return JournalReceipt() }
        try checkNotFenced()
        var committing = false
        do {
            return try transaction(changes, committing: &committing)
        } catch .cannotConnect(let store, let reason) {
            guard !committing, !connection.unreachable else { throw .cannotConnect(store: store, reason: reason) }
            return try transaction(changes, committing: &committing)
        }
    }

    private func transaction(_ changes: [JobChange], committing: inout Bool) throws(JournalError) -> JournalReceipt {
        var receipt = JournalReceipt()
        // BEGIN and every change in one round trip, then COMMIT in its own: whether COMMIT was
        // sent is what says if a lost session committed nothing. The fence comes first: after
        // another broker took the store, nothing is written.
        let segments = Self.segments(changes)
        var calls: [(name: String, parameters: [PostgresConnection.Value])] = [
            ("begin", []), ("fence", [.integer(epoch)]),
        ]
        var inserts: [(call: Int, jobs: [JobRecord])] = []
        for segment in segments {
            let submitted = segment.compactMap { change -> JobRecord? in
                guard case .submitted(let job) = change else { return nil }
                return job
            }
            if !submitted.isEmpty { inserts.append((calls.count, submitted)) }
            calls += Self.calls(segment)
        }
        do throws(JournalError) {
            let counts = try connection.runPipelined(calls)
            guard counts[1] == 1 else { throw fenceOut() }
            for (call, jobs) in inserts where counts[call] < jobs.count {
                // Some keys were taken: each answer names the first job with its key.
                for job in jobs {
                    if let key = job.idempotencyKey, let first = try self.job(idempotencyKey: key),
                        first.id != job.id
                    {
                        receipt.duplicates[job.id] = first
                    } else if let taken = try self.job(job.id), !taken.isSameSubmit(as: job) {
                        // Its id is another job's (a kept call's id is its client's); its own
                        // record, inserted and changed in this transaction, is the same submit.
                        receipt.duplicates[job.id] = taken
                    }
                }
            }
            committing = true
            try connection.execute("COMMIT")
            renewed?()
        } catch {
            if !committing { connection.rollBack() }
            throw error
        }
        return receipt
    }

    /// `changes` cut, in order, into runs in which no job appears twice: within a run the
    /// statements of different kinds touch different rows, so their order does not matter,
    /// while a job's own changes keep theirs from run to run.
    private static func segments(_ changes: [JobChange]) -> [[JobChange]] {
        var segments: [[JobChange]] = [[]]
        var seen: Set<[UInt8]> = []
        for change in changes {
            if !seen.insert(change.rowKey).inserted {
                segments.append([])
                seen = [change.rowKey]
            }
            segments[segments.count - 1].append(change)
        }
        return segments
    }

    /// The statements that record a run of changes (``segments(_:)``): one of each kind it has,
    /// its values in arrays.
    private static func calls(_ segment: [JobChange]) -> [(name: String, parameters: [PostgresConnection.Value])] {
        typealias Value = PostgresConnection.Value
        var jobs: [JobRecord] = []
        var starts: [(id: [UInt8], attempt: Int)] = []
        var releases: [(id: [UInt8], attempt: Int)] = []
        var keyReleases: [[UInt8]] = []
        var keyExpiries: [[UInt8]] = []
        var retains: [(id: [UInt8], expiresAt: Int64)] = []
        var reschedules: [(id: [UInt8], notBefore: Int64)] = []
        var finishes:
            [(
                id: [UInt8], state: JobRecord.State, outcome: [UInt8]?, expiresAt: Int64, startedAt: Int64,
                endedAt: Int64, progress: [UInt8]?
            )] =
                []
        var schedules: [(name: String, parameters: [Value])] = []
        var deletes: [[UInt8]] = []
        for change in segment {
            switch change {
            case .submitted(let job): jobs.append(job)
            case .started(let id, let attempt): starts.append((id, attempt))
            case .released(let id, let attempt): releases.append((id, attempt))
            case .keyReleased(let id): keyReleases.append(id)
            case .keyExpired(let id): keyExpiries.append(id)
            case .retained(let id, let expiresAt): retains.append((id, expiresAt))
            case .rescheduled(let id, let notBefore): reschedules.append((id, notBefore))
            case .finished(let id, let state, let outcome, let expiresAt, let startedAt, let endedAt, let progress):
                finishes.append((id, state, outcome, expiresAt, startedAt, endedAt, progress))
            case .scheduleSaved(let schedule):
                schedules.append(
                    ("save schedule", [.text(schedule.name), .bytes(schedule.spec), .integer(schedule.nextFire)]))
            case .scheduleAdvanced(let name, let nextFire, let lastJob):
                schedules.append(
                    ("advance schedule", [.text(name), .integer(nextFire), lastJob.map { .bytes($0) } ?? .null]))
            case .scheduleRemoved(let name):
                schedules.append(("remove schedule", [.text(name)]))
            case .servicePaused(let name, let paused):
                schedules.append((paused ? "pause service" : "resume service", [.text(name)]))
            case .deleted(let id): deletes.append(id)
            case .serviceLimited(let name, let limit):
                schedules.append(
                    limit.map { ("limit service", [.text(name), .bytes($0)]) } ?? ("unlimit service", [.text(name)]))
            case .totalsSaved(let totals):
                schedules.append(("save totals", totals.stored.map { .integer($0) }))
            }
        }
        func integers(_ values: [Int64]) -> Value { .array(element: 20, values.map { .integer($0) }) }
        func texts(_ values: [String?]) -> Value { .array(element: 25, values.map { $0.map { .text($0) } ?? .null }) }
        func byteses(_ values: [[UInt8]?]) -> Value {
            .array(element: 17, values.map { $0.map { .bytes($0) } ?? .null })
        }
        var calls: [(name: String, parameters: [Value])] = []
        // A statement's form for one change when it has one (its arrays' sole values).
        func append(_ call: (name: String, parameters: [Value])) {
            let sole = call.parameters.compactMap { parameter -> Value? in
                guard case .array(_, let values) = parameter, values.count == 1 else { return nil }
                return values[0]
            }
            calls.append(sole.count == call.parameters.count ? (call.name + " one", sole) : call)
        }
        // Before the inserts: a new job takes the key an expired one gives up.
        if !keyExpiries.isEmpty { append(("expire key", [byteses(keyExpiries)])) }
        if !jobs.isEmpty {
            append(
                (
                    "insert",
                    [
                        byteses(jobs.map(\.id)), texts(jobs.map(\.service)), byteses(jobs.map(\.body)),
                        integers(jobs.map { Int64($0.priority) }), integers(jobs.map(\.notBefore)),
                        texts(jobs.map(\.idempotencyKey)), integers(jobs.map(\.state.rawValue)),
                        integers(jobs.map { Int64($0.attempt) }), byteses(jobs.map(\.outcome)),
                        integers(jobs.map(\.expiresAt)), integers(jobs.map(\.submittedAt)),
                        byteses(jobs.map(\.options)), integers(jobs.map(\.startedAt)), integers(jobs.map(\.endedAt)),
                    ]
                ))
        }
        if !starts.isEmpty {
            append(("start", [byteses(starts.map(\.id)), integers(starts.map { Int64($0.attempt) })]))
        }
        if !releases.isEmpty {
            append(("release", [byteses(releases.map(\.id)), integers(releases.map { Int64($0.attempt) })]))
        }
        if !keyReleases.isEmpty { append(("release key", [byteses(keyReleases)])) }
        if !reschedules.isEmpty {
            append(("reschedule", [byteses(reschedules.map(\.id)), integers(reschedules.map(\.notBefore))]))
        }
        if !finishes.isEmpty {
            append(
                (
                    "finish",
                    [
                        byteses(finishes.map(\.id)), integers(finishes.map(\.state.rawValue)),
                        byteses(finishes.map(\.outcome)), integers(finishes.map(\.expiresAt)),
                        integers(finishes.map(\.startedAt)), integers(finishes.map(\.endedAt)),
                        byteses(finishes.map(\.progress)),
                    ]
                ))
        }
        // After the finishes: a step's end and its flow's, written together, keep the flow's.
        if !retains.isEmpty { append(("retain", [byteses(retains.map(\.id)), integers(retains.map(\.expiresAt))])) }
        if !deletes.isEmpty { append(("delete", [byteses(deletes)])) }
        return calls + schedules
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

    public func select(_ selection: JobSelection, after: Int64, limit: Int) throws(JournalError) -> [JobMatch] {
        try checkNotFenced()
        var found: [JobMatch] = []
        try connection.run(
            "select",
            [
                selection.state.map { .integer($0.rawValue) } ?? .null, selection.service.map { .text($0) } ?? .null,
                selection.submittedAfter.map { .integer($0) } ?? .null,
                selection.submittedBefore.map { .integer($0) } ?? .null, .integer(after),
                .integer(Int64(max(0, limit))),
            ]
        ) { row throws(JournalError) in
            guard let id = row.bytes(1), let state = JobRecord.State(rawValue: row.integer(2)),
                let service = row.text(3)
            else { throw .corrupt(path: connection.store, reason: "a job row with a missing id, state or service") }
            found.append(
                JobMatch(
                    seq: row.integer(0), id: id, state: state, service: service, idempotencyKey: row.text(4),
                    outcome: row.bytes(5)))
        }
        return found
    }

    public func job(_ id: [UInt8]) throws(JournalError) -> JobRecord? {
        try records("byID", [.bytes(id)]).first
    }

    public func pausedServices() throws(JournalError) -> [String] {
        var found: [String] = []
        try connection.run("paused services", []) { row in found.append(row.text(0) ?? "") }
        return found
    }

    public func serviceLimits() throws(JournalError) -> [(name: String, limit: [UInt8])] {
        var found: [(name: String, limit: [UInt8])] = []
        try connection.run("service limits", []) { row in found.append((row.text(0) ?? "", row.bytes(1) ?? [])) }
        return found
    }

    public func totals() throws(JournalError) -> JobTotals {
        var totals = JobTotals()
        try connection.run("totals", []) { row in totals = JobTotals(stored: (0..<5).map { row.integer($0) }) }
        return totals
    }

    public func schedules() throws(JournalError) -> [ScheduleRecord] {
        var found: [ScheduleRecord] = []
        try connection.run("schedules", []) { row in
            found.append(
                ScheduleRecord(
                    name: row.text(0) ?? "", spec: row.bytes(1) ?? [], nextFire: row.integer(2), lastJob: row.bytes(3)))
        }
        return found
    }

    public func job(idempotencyKey: String) throws(JournalError) -> JobRecord? {
        try records("byKey", [.text(idempotencyKey)]).first
    }

    /// One statement for them all: a flow's steps cost one round trip, not one each.
    public func jobs(idempotencyKeys: [String]) throws(JournalError) -> [JobRecord] {
        guard !idempotencyKeys.isEmpty else { return [] }
        return try records("byKeys", [.array(element: 25, idempotencyKeys.map { .text($0) })])
    }

    public func deleteExpired(before now: Int64, limit: Int) throws(JournalError) -> Int {
        try checkNotFenced()
        return try connection.run("expire", [.integer(now), .integer(Int64(limit))])
    }

    public func byteCount() throws(JournalError) -> Int {
        try count("bytes")
    }

    public func jobCount() throws(JournalError) -> Int {
        try count("count")
    }

    public func count(state: JobRecord.State?, service: String?, atMost: Int) throws(JournalError) -> Int {
        try checkNotFenced()
        var value: Int64 = 0
        try connection.run(
            "matching",
            [
                state.map { .integer($0.rawValue) } ?? .null, service.map { .text($0) } ?? .null,
                .integer(Int64(max(0, atMost))),
            ]
        ) { row in value = row.integer(0) }
        return Int(value)
    }

    private func count(_ statement: String) throws(JournalError) -> Int {
        try checkNotFenced()
        var value: Int64 = 0
        try connection.run(statement, []) { row in value = row.integer(0) }
        return Int(value)
    }

    private func records(_ statement: String, _ parameters: [PostgresConnection.Value]) throws(JournalError)
        -> [JobRecord]
    {
        try checkNotFenced()
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
        var record = JobRecord(
            id: id, service: service, body: body, priority: Int(row.integer(3)), notBefore: row.integer(4),
            idempotencyKey: row.text(5), state: state, attempt: Int(row.integer(7)), outcome: row.bytes(8),
            expiresAt: row.integer(9), submittedAt: row.integer(10), options: row.bytes(11) ?? [])
        record.startedAt = row.integer(12)
        record.endedAt = row.integer(13)
        record.progress = row.bytes(14)
        return record
    }
}
