import Foundation

/// The embedded job store: one SQLite file in WAL mode, written with `synchronous=FULL`, so a
/// transaction is on disk (fsync'd) when ``apply(_:)`` returns.
///
/// Why SQLite from the system (Debian's `libsqlite3-dev`) through a thin wrapper
/// (``SQLiteDatabase``): it is the most tested embedded store there is, on every Linux machine
/// already; the Swift bindings in the local mirror are either tied to SwiftNIO's event loops
/// (sqlite-nio: a second threading model beside the I/O thread) or larger than the dozen calls
/// the journal needs (GRDB). As with libzmq, one module owns the C API.
///
/// On open it checks the file: a file that is not SQLite, a SQLite database of something else,
/// or one whose pages fail `PRAGMA quick_check` is refused with ``JournalError/corrupt(path:reason:)``.
/// A torn last write (a crash in the middle of a commit) is not damage: SQLite's WAL frames carry
/// checksums and the incomplete transaction is dropped on open; every committed one is kept.
public final class SQLiteJobStore: JobStore {
    /// The file's format, in its `sky_meta` table.
    static let format = "sky-journal-2"

    public let path: String
    private let database: SQLiteDatabase
    private let insert: SQLiteDatabase.Statement
    private let start: SQLiteDatabase.Statement
    private let reschedule: SQLiteDatabase.Statement
    private let release: SQLiteDatabase.Statement
    private let releaseKey: SQLiteDatabase.Statement
    private let expireKey: SQLiteDatabase.Statement
    private let retain: SQLiteDatabase.Statement
    private let finish: SQLiteDatabase.Statement
    private let byID: SQLiteDatabase.Statement
    private let byKey: SQLiteDatabase.Statement
    private let open: SQLiteDatabase.Statement
    private let expire: SQLiteDatabase.Statement
    private let listing: SQLiteDatabase.Statement
    private let saveSchedule: SQLiteDatabase.Statement
    private let advanceSchedule: SQLiteDatabase.Statement
    private let removeSchedule: SQLiteDatabase.Statement
    private let allSchedules: SQLiteDatabase.Statement
    private let pause: SQLiteDatabase.Statement
    private let resume: SQLiteDatabase.Statement
    private let allPaused: SQLiteDatabase.Statement
    private let setLimit: SQLiteDatabase.Statement
    private let removeLimit: SQLiteDatabase.Statement
    private let allLimits: SQLiteDatabase.Statement
    private let saveTotals: SQLiteDatabase.Statement
    private let readTotals: SQLiteDatabase.Statement
    private let matching: SQLiteDatabase.Statement
    private let selecting: SQLiteDatabase.Statement
    private let delete: SQLiteDatabase.Statement

    private static let columns =
        "id, service, body, priority, not_before, idempotency_key, state, attempt, outcome, expires_at, submitted_at, options"
    /// What an insert writes: ``columns``, and the times a job that is kept as it runs or
    /// after it ended (a call its caller left) starts with.
    private static let insertColumns = columns + ", started_at, ended_at"
    /// What a read takes: ``insertColumns``, and an outcome's progress.
    private static let readColumns = insertColumns + ", progress"

    /// Opens the journal at `path`, creating it if there is none.
    ///
    /// A journal this store creates is never empty on disk: it is made under a staging name and
    /// renamed into place once its schema is committed. So an empty file at `path` was not made
    /// here; it is more often a copy or restore that failed than a fresh start, and taking it
    /// as a new journal would silently lose every job. It is refused with
    /// ``JournalError/empty(path:)``.
    /// - Throws: ``JournalError/empty(path:)``, ``JournalError/corrupt(path:reason:)`` for a file
    ///   that is not a Sky journal, ``JournalError/cannotOpen(path:reason:)``.
    public init(path: String) throws(JournalError) {
        self.path = path
        var status = stat()
        if stat(path, &status) == 0 {
            if status.st_mode & S_IFMT == S_IFREG && status.st_size == 0 { throw .empty(path: path) }
        } else if errno == ENOENT {
            try Self.create(path)
        }
        database = try SQLiteDatabase(path: path)
        try Self.check(database)
        try database.execute(Self.schema)
        try Self.addTimes(database)
        try Self.addProgress(database)
        insert = try database.prepare(
            "INSERT INTO jobs (\(Self.insertColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) ON CONFLICT DO NOTHING"
        )
        // An outcome is recorded once: a job that already ended keeps its first.
        start = try database.prepare("UPDATE jobs SET state = 1, attempt = ?2 WHERE id = ?1 AND state < 2")
        reschedule = try database.prepare("UPDATE jobs SET state = 0, not_before = ?2 WHERE id = ?1 AND state < 2")
        release = try database.prepare("UPDATE jobs SET state = 0, attempt = ?2 WHERE id = ?1 AND state < 2")
        releaseKey = try database.prepare("UPDATE jobs SET idempotency_key = NULL WHERE id = ?1 AND state < 2")
        expireKey = try database.prepare("UPDATE jobs SET idempotency_key = NULL WHERE id = ?1")
        retain = try database.prepare("UPDATE jobs SET expires_at = ?2 WHERE id = ?1 AND state >= 2")
        finish = try database.prepare(
            "UPDATE jobs SET state = ?2, outcome = ?3, expires_at = ?4, started_at = ?5, ended_at = ?6, progress = ?7 WHERE id = ?1 AND state < 2"
        )
        byID = try database.prepare("SELECT \(Self.readColumns) FROM jobs WHERE id = ?1")
        byKey = try database.prepare("SELECT \(Self.readColumns) FROM jobs WHERE idempotency_key = ?1")
        open = try database.prepare("SELECT \(Self.readColumns) FROM jobs WHERE state < 2 ORDER BY seq")
        // ?1 and ?2 are NULL for "any"; newest first by submit order.
        listing = try database.prepare(
            "SELECT \(Self.readColumns) FROM jobs WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR service = ?2) ORDER BY seq DESC LIMIT ?3"
        )
        expire = try database.prepare(
            "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE state >= 2 AND expires_at < ?1 LIMIT ?2)")
        saveSchedule = try database.prepare(
            "INSERT INTO schedules (name, spec, next_fire) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, next_fire = excluded.next_fire"
        )
        advanceSchedule = try database.prepare(
            "UPDATE schedules SET next_fire = ?2, last_job = coalesce(?3, last_job) WHERE name = ?1")
        removeSchedule = try database.prepare("DELETE FROM schedules WHERE name = ?1")
        allSchedules = try database.prepare("SELECT name, spec, next_fire, last_job FROM schedules ORDER BY name")
        pause = try database.prepare("INSERT OR IGNORE INTO paused_services (name) VALUES (?1)")
        resume = try database.prepare("DELETE FROM paused_services WHERE name = ?1")
        allPaused = try database.prepare("SELECT name FROM paused_services ORDER BY name")
        setLimit = try database.prepare(
            "INSERT INTO service_limits (name, spec) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec"
        )
        removeLimit = try database.prepare("DELETE FROM service_limits WHERE name = ?1")
        allLimits = try database.prepare("SELECT name, spec FROM service_limits ORDER BY name")
        saveTotals = try database.prepare(
            "INSERT INTO totals (id, submitted, succeeded, failed, cancelled, retried) VALUES (1, ?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO UPDATE SET submitted = excluded.submitted, succeeded = excluded.succeeded, failed = excluded.failed, cancelled = excluded.cancelled, retried = excluded.retried"
        )
        readTotals = try database.prepare("SELECT submitted, succeeded, failed, cancelled, retried FROM totals")
        matching = try database.prepare(
            "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR service = ?2) LIMIT ?3)"
        )
        // A failed or cancelled job's outcome only: the others' are results, maybe large.
        selecting = try database.prepare(
            "SELECT seq, id, state, service, idempotency_key, CASE WHEN state >= 3 THEN outcome END FROM jobs WHERE seq > ?5 AND (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR service = ?2) AND (?3 IS NULL OR submitted_at >= ?3) AND (?4 IS NULL OR submitted_at < ?4) ORDER BY seq LIMIT ?6"
        )
        delete = try database.prepare("DELETE FROM jobs WHERE id = ?1 AND state >= 2")
    }

    /// The journal's settings and tables; run on every open (a journal of an older build of
    /// this format gets what it lacks).
    private static let schema = """
        PRAGMA journal_mode = WAL;
        PRAGMA synchronous = FULL;
        PRAGMA journal_size_limit = 8388608;
        CREATE TABLE IF NOT EXISTS sky_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT OR IGNORE INTO sky_meta VALUES ('format', '\(format)');
        CREATE TABLE IF NOT EXISTS jobs (
            seq INTEGER PRIMARY KEY,
            id BLOB NOT NULL UNIQUE,
            service TEXT NOT NULL,
            body BLOB NOT NULL,
            priority INTEGER NOT NULL,
            not_before INTEGER NOT NULL,
            idempotency_key TEXT UNIQUE,
            state INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            outcome BLOB,
            expires_at INTEGER NOT NULL,
            submitted_at INTEGER NOT NULL,
            options BLOB NOT NULL,
            started_at INTEGER NOT NULL DEFAULT 0,
            ended_at INTEGER NOT NULL DEFAULT 0,
            progress BLOB
        );
        CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (seq) WHERE state < 2;
        CREATE INDEX IF NOT EXISTS jobs_expiry ON jobs (expires_at) WHERE state >= 2;
        CREATE TABLE IF NOT EXISTS schedules (
            name TEXT PRIMARY KEY,
            spec BLOB NOT NULL,
            next_fire INTEGER NOT NULL,
            last_job BLOB
        );
        CREATE TABLE IF NOT EXISTS paused_services (name TEXT PRIMARY KEY);
        CREATE TABLE IF NOT EXISTS service_limits (name TEXT PRIMARY KEY, spec BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS totals (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            submitted INTEGER NOT NULL,
            succeeded INTEGER NOT NULL,
            failed INTEGER NOT NULL,
            cancelled INTEGER NOT NULL,
            retried INTEGER NOT NULL
        );
        """

    /// A journal made before outcomes recorded their times gets the two columns (0: unknown).
    private static func addTimes(_ database: SQLiteDatabase) throws(JournalError) {
        var names: [String] = []
        try database.prepare("PRAGMA table_info(jobs)").run([]) { row in names.append(row.text(1) ?? "") }
        guard !names.contains("started_at") else { return }
        try database.execute(
            "ALTER TABLE jobs ADD COLUMN started_at INTEGER NOT NULL DEFAULT 0; ALTER TABLE jobs ADD COLUMN ended_at INTEGER NOT NULL DEFAULT 0"
        )
    }

    /// A journal made before outcomes recorded their progress gets the column (NULL: none).
    private static func addProgress(_ database: SQLiteDatabase) throws(JournalError) {
        var names: [String] = []
        try database.prepare("PRAGMA table_info(jobs)").run([]) { row in names.append(row.text(1) ?? "") }
        guard !names.contains("progress") else { return }
        try database.execute("ALTER TABLE jobs ADD COLUMN progress BLOB")
    }

    /// Makes a new journal at `path` (where there is no file): under a staging name first, its
    /// schema committed and the connection closed (SQLite then checkpoints its WAL into the
    /// file and fsyncs it), then renamed into place. A crash in between leaves no file at
    /// `path`, so the next start makes it again, and never an empty one that ``init(path:)``
    /// would refuse.
    private static func create(_ path: String) throws(JournalError) {
        let staging = path + ".new"
        for leftover in [staging, staging + "-wal", staging + "-shm"] { unlink(leftover) }
        do {
            let database = try SQLiteDatabase(path: staging)
            try database.execute(schema)
        } catch .cannotOpen(_, let reason) {
            // The operator knows the journal's name, not the staging one.
            throw .cannotOpen(path: path, reason: reason)
        }
        guard rename(staging, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(staging)
            throw .cannotOpen(path: path, reason: "cannot rename the new journal \(staging) into place: \(reason)")
        }
    }

    /// Refuses a file that is not a Sky journal or is damaged.
    private static func check(_ database: SQLiteDatabase) throws(JournalError) {
        var tables: [String] = []
        try database.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").run([]) { row in
            if let name = row.text(0) { tables.append(name) }
        }
        if !tables.isEmpty {
            guard tables.contains("sky_meta") else {
                throw .corrupt(
                    path: database.path,
                    reason: "a SQLite database of something else (tables: \(tables.prefix(5).joined(separator: ", ")))")
            }
            var format: String?
            try database.prepare("SELECT value FROM sky_meta WHERE key = 'format'").run([]) { format = $0.text(0) }
            guard format == Self.format else {
                throw .corrupt(
                    path: database.path, reason: "format \(format ?? "none"), this broker reads \(Self.format)")
            }
        }
        var problems: [String] = []
        try database.prepare("PRAGMA quick_check").run([]) { row in
            if let line = row.text(0), line != "ok" { problems.append(line) }
        }
        guard problems.isEmpty else {
            throw .corrupt(path: database.path, reason: problems.prefix(3).joined(separator: "; "))
        }
    }

    @discardableResult
    public func apply(_ changes: [JobChange]) throws(JournalError) -> JournalReceipt {
        var receipt = JournalReceipt()
        guard !changes.isEmpty else { return receipt }
        try database.execute("BEGIN IMMEDIATE")
        do {
            for change in changes {
                switch change {
                case .submitted(let job):
                    try insert.run([
                        .blob(job.id), .text(job.service), .blob(job.body), .integer(Int64(job.priority)),
                        .integer(job.notBefore), job.idempotencyKey.map { .text($0) } ?? .null,
                        .integer(job.state.rawValue), .integer(Int64(job.attempt)),
                        job.outcome.map { .blob($0) } ?? .null, .integer(job.expiresAt), .integer(job.submittedAt),
                        .blob(job.options), .integer(job.startedAt), .integer(job.endedAt),
                    ])
                    if database.changes == 0 {
                        if let key = job.idempotencyKey, let first = try self.job(idempotencyKey: key),
                            first.id != job.id
                        {
                            receipt.duplicates[job.id] = first
                        } else if let taken = try self.job(job.id), !taken.isSameSubmit(as: job) {
                            // Its id is another job's (a kept call's id is its client's).
                            receipt.duplicates[job.id] = taken
                        }
                    }
                case .started(let id, let attempt):
                    try start.run([.blob(id), .integer(Int64(attempt))])
                case .released(let id, let attempt):
                    try release.run([.blob(id), .integer(Int64(attempt))])
                case .rescheduled(let id, let notBefore):
                    try reschedule.run([.blob(id), .integer(notBefore)])
                case .keyReleased(let id):
                    try releaseKey.run([.blob(id)])
                case .keyExpired(let id):
                    try expireKey.run([.blob(id)])
                case .retained(let id, let expiresAt):
                    try retain.run([.blob(id), .integer(expiresAt)])
                case .finished(let id, let state, let outcome, let expiresAt, let startedAt, let endedAt, let progress):
                    try finish.run([
                        .blob(id), .integer(state.rawValue), outcome.map { .blob($0) } ?? .null, .integer(expiresAt),
                        .integer(startedAt), .integer(endedAt), progress.map { .blob($0) } ?? .null,
                    ])
                case .scheduleSaved(let schedule):
                    try saveSchedule.run([.text(schedule.name), .blob(schedule.spec), .integer(schedule.nextFire)])
                case .scheduleAdvanced(let name, let nextFire, let lastJob):
                    try advanceSchedule.run([.text(name), .integer(nextFire), lastJob.map { .blob($0) } ?? .null])
                case .scheduleRemoved(let name):
                    try removeSchedule.run([.text(name)])
                case .servicePaused(let name, let paused):
                    try (paused ? pause : resume).run([.text(name)])
                case .deleted(let id):
                    try delete.run([.blob(id)])
                case .serviceLimited(let name, let limit):
                    if let limit {
                        try setLimit.run([.text(name), .blob(limit)])
                    } else {
                        try removeLimit.run([.text(name)])
                    }
                case .totalsSaved(let totals):
                    try saveTotals.run(totals.stored.map { .integer($0) })
                }
            }
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
        return receipt
    }

    public func list(state: JobRecord.State?, service: String?, limit: Int) throws(JournalError) -> [JobRecord] {
        var jobs: [JobRecord] = []
        try listing.run([
            state.map { .integer($0.rawValue) } ?? .null, service.map { .text($0) } ?? .null,
            .integer(Int64(max(0, limit))),
        ]) { row throws(JournalError) in jobs.append(try record(row)) }
        return jobs
    }

    public func select(_ selection: JobSelection, after: Int64, limit: Int) throws(JournalError) -> [JobMatch] {
        var found: [JobMatch] = []
        try selecting.run([
            selection.state.map { .integer($0.rawValue) } ?? .null, selection.service.map { .text($0) } ?? .null,
            selection.submittedAfter.map { .integer($0) } ?? .null,
            selection.submittedBefore.map { .integer($0) } ?? .null, .integer(after), .integer(Int64(max(0, limit))),
        ]) { row throws(JournalError) in
            guard let id = row.blob(1), let state = JobRecord.State(rawValue: row.integer(2)), let service = row.text(3)
            else { throw .corrupt(path: path, reason: "a job row with a missing id, state or service") }
            found.append(
                JobMatch(
                    seq: row.integer(0), id: id, state: state, service: service, idempotencyKey: row.text(4),
                    outcome: row.blob(5)))
        }
        return found
    }

    public func schedules() throws(JournalError) -> [ScheduleRecord] {
        var found: [ScheduleRecord] = []
        try allSchedules.run([]) { row throws(JournalError) in
            found.append(
                ScheduleRecord(
                    name: row.text(0) ?? "", spec: row.blob(1) ?? [], nextFire: row.integer(2), lastJob: row.blob(3)))
        }
        return found
    }

    public func pausedServices() throws(JournalError) -> [String] {
        var found: [String] = []
        try allPaused.run([]) { row throws(JournalError) in found.append(row.text(0) ?? "") }
        return found
    }

    public func count(state: JobRecord.State?, service: String?, atMost: Int) throws(JournalError) -> Int {
        var count = 0
        try matching.run([
            state.map { .integer($0.rawValue) } ?? .null, service.map { .text($0) } ?? .null,
            .integer(Int64(max(0, atMost))),
        ]) { row throws(JournalError) in count = Int(row.integer(0)) }
        return count
    }

    public func serviceLimits() throws(JournalError) -> [(name: String, limit: [UInt8])] {
        var found: [(name: String, limit: [UInt8])] = []
        try allLimits.run([]) { row throws(JournalError) in found.append((row.text(0) ?? "", row.blob(1) ?? [])) }
        return found
    }

    public func totals() throws(JournalError) -> JobTotals {
        var totals = JobTotals()
        try readTotals.run([]) { row throws(JournalError) in totals = JobTotals(stored: (0..<5).map { row.integer($0) })
        }
        return totals
    }

    public func unfinished() throws(JournalError) -> [JobRecord] {
        var jobs: [JobRecord] = []
        try open.run([]) { row throws(JournalError) in jobs.append(try record(row)) }
        return jobs
    }

    public func job(_ id: [UInt8]) throws(JournalError) -> JobRecord? {
        var job: JobRecord?
        try byID.run([.blob(id)]) { row throws(JournalError) in job = try record(row) }
        return job
    }

    public func job(idempotencyKey: String) throws(JournalError) -> JobRecord? {
        var job: JobRecord?
        try byKey.run([.text(idempotencyKey)]) { row throws(JournalError) in job = try record(row) }
        return job
    }

    public func deleteExpired(before now: Int64, limit: Int) throws(JournalError) -> Int {
        try expire.run([.integer(now), .integer(Int64(limit))])
        return database.changes
    }

    /// The bytes of the pages in use: deleted jobs' pages go to the free list, which new jobs
    /// take first, but the file does not shrink (a journal measured by its file stayed over
    /// `--journal-max-bytes` for good once it had been, its jobs all deleted). The WAL holds
    /// copies of pages, not more jobs: left out.
    public func byteCount() throws(JournalError) -> Int {
        var bytes = 0
        try database.prepare(
            "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()"
        ).run([]) { bytes = Int($0.integer(0)) }
        return bytes
    }

    public func jobCount() throws(JournalError) -> Int {
        var count = 0
        try database.prepare("SELECT count(*) FROM jobs").run([]) { count = Int($0.integer(0)) }
        return count
    }

    private func record(_ row: SQLiteDatabase.Row) throws(JournalError) -> JobRecord {
        guard let id = row.blob(0), let service = row.text(1), let body = row.blob(2),
            let state = JobRecord.State(rawValue: row.integer(6))
        else {
            throw .corrupt(path: path, reason: "a job row with a missing id, service, body or state")
        }
        var record = JobRecord(
            id: id, service: service, body: body, priority: Int(row.integer(3)), notBefore: row.integer(4),
            idempotencyKey: row.text(5), state: state, attempt: Int(row.integer(7)), outcome: row.blob(8),
            expiresAt: row.integer(9), submittedAt: row.integer(10), options: row.blob(11) ?? [])
        record.startedAt = row.integer(12)
        record.endedAt = row.integer(13)
        record.progress = row.blob(14)
        return record
    }
}
