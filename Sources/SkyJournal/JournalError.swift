/// Why the journal could not do what was asked. Every case names the file (or the PostgreSQL
/// store, its URI without the password) and says what to do.
public enum JournalError: Error, Equatable, CustomStringConvertible {
    /// The file could not be opened or created (a missing directory, no permission).
    case cannotOpen(path: String, reason: String)
    /// The file is not a Sky journal or is damaged beyond what SQLite recovers by itself.
    case corrupt(path: String, reason: String)
    /// The file is empty (0 bytes). A journal the broker made is never empty (see
    /// ``SQLiteJobStore/init(path:)``), so this is more often a copy or restore that failed
    /// than a fresh start: taken as a new journal, every job would be silently lost.
    case empty(path: String)
    /// The disk (or the file system's quota) is full: nothing was written.
    case full(path: String)
    /// The journal refuses new jobs: it holds `limit` bytes already (`--journal-max-bytes`).
    case overLimit(path: String, bytes: Int, limit: Int)
    /// Any other failure of SQLite or PostgreSQL, with its words.
    case failed(path: String, operation: String, reason: String)
    /// The PostgreSQL server could not be reached, or its connection was lost.
    case cannotConnect(store: String, reason: String)
    /// Another broker holds the PostgreSQL store.
    case inUse(store: String)
    /// Another broker took the PostgreSQL store (a newer epoch) while this broker was cut off
    /// from it or paused.
    case fenced(store: String)
    /// The active broker's lease on the PostgreSQL store went unrenewed for `seconds` while a
    /// standby waits, and the broker cannot tell whether the standby took over (it was paused,
    /// or the standby's endpoint cannot be asked): it steps down so that the standby takes over.
    case leaseLapsed(store: String, seconds: Int)
    /// The PostgreSQL store's schema is newer than this broker reads.
    case newerSchema(store: String, found: Int64, known: Int64)
    /// The broker was told to stop while it waited as a standby on the PostgreSQL store.
    case stoppedWaiting(store: String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            "cannot open the journal \(path): \(reason). Check that its directory exists and is writable (skybroker --state-dir)."
        case .corrupt(let path, let reason):
            "the journal \(path) is damaged or not a Sky journal (\(reason)). Move it aside to start with an empty one; the jobs it held are then lost."
        case .empty(let path):
            "the journal \(path) is an empty file (0 bytes), which this broker did not make: more often a copy or restore that failed than a fresh start. Copy the journal again (with its -wal file if it has one), or remove the empty file to start with no jobs."
        case .full(let path):
            "the disk holding the journal \(path) is full: new jobs are refused until space is freed."
        case .overLimit(let path, let bytes, let limit):
            "the journal \(path) holds \(bytes) bytes, at its limit of \(limit) (--journal-max-bytes): new jobs are refused until results expire or are deleted."
        case .failed(let path, let operation, let reason):
            "the journal \(path) failed to \(operation): \(reason)."
        case .cannotConnect(let store, let reason):
            "cannot reach the job store \(store) (\(reason)). Check that the server runs and that the URI's hosts, ports, database and user are right; a password belongs in PGPASSWORD or ~/.pgpass (skybroker --store)."
        case .inUse(let store):
            "another skybroker uses the job store \(store) (it holds the store's lock); stop it, or give this one another database"
        case .fenced(let store):
            "another skybroker took the job store \(store) while this broker was cut off from it or paused: this broker records nothing more and stops, since what it holds of the jobs may be stale. Started again, it waits as a standby"
        case .leaseLapsed(let store, let seconds):
            "this broker's lease on the job store \(store) went unrenewed for \(seconds) s while a standby waits (this broker was paused, or the store was out of reach and the standby's clients endpoint cannot be asked whether it took over): it steps down so that the standby takes over. Started again, it waits as a standby"
        case .stoppedWaiting(let store):
            "stopped while waiting as a standby on the job store \(store): this broker never became the active one"
        case .newerSchema(let store, let found, let known):
            "the job store \(store) has schema version \(found), newer than this broker's \(known): a newer skybroker has used it. Run that version (a schema is never downgraded)."
        }
    }
}
