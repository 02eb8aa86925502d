import CSQLite

/// One SQLite connection: the thin wrapper over the C API, the only code that calls it.
///
/// Deliberately not `Sendable`: a connection belongs to the thread that uses it (the journal's
/// writer thread). Errors are ``JournalError``s that name the file.
final class SQLiteDatabase {
    let path: String
    private let handle: OpaquePointer

    /// Opens (or creates) the database at `path`.
    init(path: String) throws(JournalError) {
        self.path = path
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let status = sqlite3_open_v2(path, &handle, flags, nil)
        guard status == SQLITE_OK, let handle else {
            let reason = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_close(handle)
            throw .cannotOpen(path: path, reason: reason)
        }
        self.handle = handle
        // A busy database (another process holds it) fails at once instead of hanging.
        sqlite3_busy_timeout(handle, 0)
    }

    deinit {
        sqlite3_close_v2(handle)
    }

    /// Runs statements that return no rows.
    func execute(_ sql: String) throws(JournalError) {
        var message: UnsafeMutablePointer<CChar>?
        let status = sqlite3_exec(handle, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        guard status == SQLITE_OK else {
            throw error(status, operation: sql, message: message.map { String(cString: $0) })
        }
    }

    /// Compiles one statement.
    func prepare(_ sql: String) throws(JournalError) -> Statement {
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status, operation: sql) }
        return Statement(database: self, handle: statement, sql: sql)
    }

    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// The typed error for a failed call: a full disk, a damaged file, or SQLite's own words.
    func error(_ status: Int32, operation: String, message: String? = nil) -> JournalError {
        let reason = message ?? String(cString: sqlite3_errmsg(handle))
        switch status & 0xFF {
        case SQLITE_FULL: return .full(path: path)
        case SQLITE_CORRUPT, SQLITE_NOTADB: return .corrupt(path: path, reason: reason)
        case SQLITE_CANTOPEN, SQLITE_PERM, SQLITE_READONLY: return .cannotOpen(path: path, reason: reason)
        case SQLITE_IOERR:
            // A write the file system refused: no room, a quota, or a file-size limit (EFBIG).
            return .failed(
                path: path, operation: "write", reason: "\(reason): the disk may be full, or the file over a size limit"
            )
        default:
            let statement = operation.split(separator: " ").prefix(3).joined(separator: " ")
            return .failed(path: path, operation: statement, reason: reason)
        }
    }

    /// A compiled statement, reset after each use.
    final class Statement {
        private unowned let database: SQLiteDatabase
        private let handle: OpaquePointer
        private let sql: String

        fileprivate init(database: SQLiteDatabase, handle: OpaquePointer, sql: String) {
            self.database = database
            self.handle = handle
            self.sql = sql
        }

        deinit {
            sqlite3_finalize(handle)
        }

        /// The values of the statement's parameters, in order (`?1`, `?2`, …).
        enum Value {
            case integer(Int64)
            case text(String)
            case blob([UInt8])
            case null
        }

        /// Binds `values` and steps through every row, handing each to `row`.
        func run(_ values: [Value], row: (Row) throws(JournalError) -> Void = { _ in }) throws(JournalError) {
            defer {
                sqlite3_reset(handle)
                sqlite3_clear_bindings(handle)
            }
            for (index, value) in values.enumerated() {
                let position = Int32(index + 1)
                let status: Int32
                switch value {
                case .integer(let integer): status = sqlite3_bind_int64(handle, position, integer)
                case .text(let text): status = sqlite3_bind_text(handle, position, text, -1, Self.transient)
                case .blob(let bytes):
                    status = bytes.withUnsafeBytes {
                        sqlite3_bind_blob(handle, position, $0.baseAddress, Int32($0.count), Self.transient)
                    }
                case .null: status = sqlite3_bind_null(handle, position)
                }
                guard status == SQLITE_OK else { throw database.error(status, operation: sql) }
            }
            while true {
                let status = sqlite3_step(handle)
                if status == SQLITE_DONE { return }
                guard status == SQLITE_ROW else { throw database.error(status, operation: sql) }
                try row(Row(handle: handle))
            }
        }

        /// SQLite copies bound text and blobs (`SQLITE_TRANSIENT`).
        private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    }

    /// The current row of a statement; valid only inside the `row` closure.
    struct Row {
        fileprivate let handle: OpaquePointer

        func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

        func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

        func text(_ column: Int32) -> String? {
            guard let text = sqlite3_column_text(handle, column) else { return nil }
            return String(cString: text)
        }

        func blob(_ column: Int32) -> [UInt8]? {
            guard !isNull(column) else { return nil }
            let count = Int(sqlite3_column_bytes(handle, column))
            guard count > 0, let bytes = sqlite3_column_blob(handle, column) else { return [] }
            return Array(UnsafeRawBufferPointer(start: bytes, count: count))
        }
    }
}
