import CLibPQ
import Foundation
import SkyJournal

/// One libpq connection: the thin wrapper over the C API, the only code that calls it.
///
/// Deliberately not `Sendable`: a connection belongs to the thread that uses it (the journal's
/// writer thread), as libpq requires. Statements are prepared once per session with typed
/// parameters and read in binary, so no value is ever spliced into SQL text. Errors are
/// ``JournalError``s that name the store (its URI without the password).
final class PostgresConnection {
    /// A parameter's value, sent in PostgreSQL's binary format.
    enum Value {
        case integer(Int64)
        case text(String)
        case bytes([UInt8])
        case null
        /// A one-dimensional array of the type `element` (an int8, text or bytea OID) whose
        /// values may be NULL: a statement takes many rows' values in one parameter.
        case array(element: UInt32, [Value])

        /// int8, text, bytea, their arrays, and "unknown" for a NULL (the server takes the
        /// statement's type).
        var oid: UInt32 {
            switch self {
            case .integer: 20
            case .text: 25
            case .bytes: 17
            case .null: 0
            case .array(let element, _): Self.arrayType(of: element)
            }
        }

        /// The OID of the array of `element` (int8[], text[], bytea[]).
        static func arrayType(of element: UInt32) -> UInt32 {
            switch element {
            case 20: 1016
            case 25: 1009
            default: 1001
            }
        }

        var binary: [UInt8]? {
            switch self {
            case .integer(let value): withUnsafeBytes(of: value.bigEndian) { Array($0) }
            case .text(let value): Array(value.utf8)
            case .bytes(let value): value
            case .null: nil
            case .array(let element, let values):
                // PostgreSQL's binary array: dimensions, a has-NULLs flag, the element type, each
                // dimension's length and lower bound, then each value's length (-1: NULL) and bytes.
                Self.binaryArray(element: element, values.map(\.binary))
            }
        }

        private static func binaryArray(element: UInt32, _ values: [[UInt8]?]) -> [UInt8] {
            var bytes: [UInt8] = []
            func append(_ value: Int32) { withUnsafeBytes(of: value.bigEndian) { bytes += $0 } }
            append(values.isEmpty ? 0 : 1)
            append(values.contains(nil) ? 1 : 0)
            append(Int32(bitPattern: element))
            if !values.isEmpty {
                append(Int32(values.count))
                append(1)
            }
            for value in values {
                append(value.map { Int32($0.count) } ?? -1)
                bytes += value ?? []
            }
            return bytes
        }
    }

    /// One row of a result, its columns read in binary.
    struct Row {
        fileprivate let result: OpaquePointer
        fileprivate let index: Int32

        func isNull(_ column: Int32) -> Bool { PQgetisnull(result, index, column) == 1 }

        func bytes(_ column: Int32) -> [UInt8]? {
            guard !isNull(column), let value = PQgetvalue(result, index, column) else { return nil }
            let count = Int(PQgetlength(result, index, column))
            return value.withMemoryRebound(to: UInt8.self, capacity: count) {
                Array(UnsafeBufferPointer(start: $0, count: count))
            }
        }

        /// The column's type (its OID: 20 for bigint).
        func type(_ column: Int32) -> UInt32 { PQftype(result, column) }

        func text(_ column: Int32) -> String? { bytes(column).map { String(decoding: $0, as: UTF8.self) } }

        /// An int8, int4 or int2 column; 0 for NULL.
        func integer(_ column: Int32) -> Int64 {
            guard let bytes = bytes(column) else { return 0 }
            var value: Int64 = 0
            for byte in bytes { value = value << 8 | Int64(byte) }
            // Sign-extend the narrower integer types.
            let shift = Int64(64 - 8 * bytes.count)
            return shift > 0 && shift < 64 ? (value << shift) >> shift : value
        }
    }

    /// The URI as given, password removed: what errors and logs name.
    let store: String
    private let uri: String
    /// The URI's passwords, kept out of every message (``secrets(in:)``).
    private let secrets: [String]
    private var handle: OpaquePointer?
    /// Statements prepared in the current session, by name, with their SQL and types.
    private var statements: [String: (sql: String, types: [UInt32])] = [:]
    private var prepared: Set<String> = []
    /// The session ended, whatever libpq's status says yet: the next use connects again.
    private var broken = false
    /// Runs after a lost session was replaced by a new one, before anything else is sent on it
    /// (the store takes its lock again there).
    var onReconnect: (() throws(JournalError) -> Void)?
    /// How long a statement waits without hearing from the server before the session is given
    /// up, and a connection attempt to each host lasts at most (rounded up to whole seconds,
    /// 2 at least: libpq's `connect_timeout`). A server that hangs (stopped, stuck on its disk)
    /// keeps its connection open and the kernel acknowledges what is sent, so no TCP time-out
    /// ever ends the wait: sessions are non-blocking and every wait is a `poll` bounded by it.
    let silenceBound: Duration
    private let setup: String?
    /// When and how the server was last found unreachable after a wait (a session given up on
    /// its silence, or an attempt to connect that timed out), until a connection succeeds.
    /// Unlike a session the server closed (it restarted, or failed over) or a refused
    /// connection, a new one made at once would most likely wait as long: for half of
    /// ``silenceBound`` the next uses fail at once with this error instead of each waiting the
    /// bound anew, so that the submits queued behind one are answered.
    private var unreachableSince: (at: ContinuousClock.Instant, error: JournalError)?
    var unreachable: Bool { unreachableSince != nil }

    /// Connects to the server `uri` names (a libpq connection URI or key-value string; several
    /// hosts are tried in order, and `target_session_attrs=read-write` picks the primary).
    /// - Parameter setup: SQL run at the start of every session (its settings).
    init(uri: String, silenceBound: Duration, setup: String? = nil) throws(JournalError) {
        self.uri = uri
        self.silenceBound = silenceBound
        self.setup = setup
        self.secrets = Self.secrets(in: uri)
        self.store = Self.redacted(uri)
        try connect()
    }

    deinit {
        PQfinish(handle)
    }

    /// `uri` with every password it holds replaced by `***` (``passwords(in:)``), by where they
    /// stand, so that the rest of it reads as written (a password of one letter replaced as text
    /// took that letter out of the whole URI, and showed where it stood).
    static func redacted(_ uri: String) -> String {
        var text = uri
        for span in passwords(in: uri).reversed() where !span.isEmpty {
            text.replaceSubrange(span, with: "***")
        }
        return text
    }

    /// Where `uri`'s passwords stand, in order: the user-info's after its first `:` (up to the
    /// last `@` before the query), and each `password` parameter's value (its key
    /// percent-decoded, any case, every occurrence).
    static func passwords(in uri: String) -> [Range<String.Index>] {
        var spans: [Range<String.Index>] = []
        let rest = uri.range(of: "://").map { uri[$0.upperBound...] } ?? uri[...]
        let query = rest.firstIndex(of: "?")
        let beforeQuery = rest[..<(query ?? rest.endIndex)]
        if let at = beforeQuery.lastIndex(of: "@"), let colon = beforeQuery[..<at].firstIndex(of: ":") {
            spans.append(beforeQuery.index(after: colon)..<at)
        }
        if let query {
            for pair in rest[rest.index(after: query)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = parts[0].removingPercentEncoding ?? String(parts[0])
                if key.lowercased() == "password", parts.count == 2 {
                    spans.append(parts[1].startIndex..<parts[1].endIndex)
                }
            }
        }
        return spans
    }

    /// The passwords `uri` holds (``passwords(in:)``), as written and percent-decoded, and the
    /// parts of each between `@`s, since libpq's messages may quote a password cut at one.
    /// Longest first.
    static func secrets(in uri: String) -> [String] {
        var found: [String] = []
        for span in passwords(in: uri) {
            let secret = uri[span]
            let decoded = secret.removingPercentEncoding.map { [$0] } ?? []
            for whole in [String(secret)] + decoded where !whole.isEmpty {
                found.append(whole)
                found += whole.split(separator: "@").filter { $0.count >= 2 }.map(String.init)
            }
        }
        return Set(found).sorted { $0.count > $1.count }
    }

    /// `text` (libpq's words) with each of `secrets` replaced by `***` where it stands apart: not
    /// inside a word, so that a short password (`e`) does not take its letter out of every word
    /// of the message, and so show itself by the gaps. libpq quotes a password only as a piece
    /// of the URI it was given (between quotes, `:`, `@`, `/`).
    static func redact(_ text: String, _ secrets: [String]) -> String {
        secrets.reduce(text) { text, secret in
            var result = ""
            var rest = text[...]
            while let found = rest.range(of: secret) {
                let before = found.lowerBound > text.startIndex ? text[text.index(before: found.lowerBound)] : nil
                let after = found.upperBound < text.endIndex ? text[found.upperBound] : nil
                let apart =
                    !(before?.isLetter ?? false) && !(before?.isNumber ?? false)
                    && !(after?.isLetter ?? false) && !(after?.isNumber ?? false)
                result += rest[..<found.lowerBound]
                result += apart ? "***" : String(rest[found])
                rest = rest[found.upperBound...]
            }
            return result + rest
        }
    }

    /// libpq's words, on one line, without the URI's passwords.
    private func said(_ text: UnsafePointer<CChar>?) -> String {
        Self.redact(Self.message(text), secrets)
    }

    /// Bounds on a connection that the URI may override: a host that does not answer costs
    /// ``silenceBound`` (2 s at least) before the next is tried, and an idle session whose
    /// server vanished without closing it (a host or network gone) is found dead by keepalives.
    var defaults: [(String, String)] {
        let (seconds, attoseconds) = silenceBound.components
        let connectTimeout = max(2, seconds + (attoseconds > 0 ? 1 : 0))
        return [
            ("connect_timeout", "\(connectTimeout)"), ("keepalives_idle", "10"), ("keepalives_interval", "5"),
            ("keepalives_count", "3"), ("tcp_user_timeout", "30000"),
        ]
    }

    private func connect() throws(JournalError) {
        let started = ContinuousClock.now
        PQfinish(handle)
        prepared = []
        broken = false
        // The defaults come before the URI (expanded from `dbname`): libpq lets later values
        // override earlier ones, so the URI's own settings win.
        let settings = defaults + [("dbname", uri)]
        handle = Self.withCStrings(settings.map { Array($0.0.utf8) + [0] }) { keywords in
            Self.withCStrings(settings.map { Array($0.1.utf8) + [0] }) { values in
                PQconnectdbParams(keywords + [nil], values + [nil], 1)
            }
        }
        guard let handle, PQstatus(handle) == CONNECTION_OK, PQsetnonblocking(handle, 1) == 0 else {
            let reason = handle.map { said(PQerrorMessage($0)) } ?? "out of memory"
            let error = JournalError.cannotConnect(store: store, reason: reason)
            if started.duration(to: .now) >= silenceBound / 2 { throw foundUnreachable(error) }
            throw error
        }
        // Notices (a table that exists already) are not errors: keep them off standard error.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        unreachableSince = nil
        if let setup { PQclear(try exchange(setup) { PQsendQuery($0, setup) }) }
    }

    private func foundUnreachable(_ error: JournalError) -> JournalError {
        unreachableSince = (.now, error)
        return error
    }

    /// Whether the session is usable; if not, one attempt to connect again (libpq tries every
    /// host of the URI, so after a failover this reaches the new primary).
    private func ensureConnected() throws(JournalError) {
        if let handle, !broken, PQstatus(handle) == CONNECTION_OK { return }
        if let (at, error) = unreachableSince, at.duration(to: .now) < silenceBound / 2 { throw error }
        try connect()
        do {
            try onReconnect?()
        } catch {
            // A session without what the hook sets up (the store's lock) must not be used.
            PQfinish(handle)
            handle = nil
            throw error
        }
    }

    /// Ends the transaction in progress without committing it, if the session still lives (the
    /// server rolled back that of a lost one): no new session is made just for that.
    func rollBack() {
        guard let handle, !broken, PQstatus(handle) == CONNECTION_OK else { return }
        PQclear((try? exchange("ROLLBACK") { PQsendQuery($0, "ROLLBACK") }) ?? nil)
    }

    /// Runs SQL that takes no parameter (several statements allowed).
    func execute(_ sql: String) throws(JournalError) {
        try ensureConnected()
        PQclear(try exchange(sql) { PQsendQuery($0, sql) })
    }

    /// Remembers a statement under `name`; it is prepared on the server at its first use in
    /// each session (a reconnect starts a new one).
    func define(_ name: String, _ sql: String, types: [UInt32]) {
        statements[name] = (sql, types)
    }

    /// Runs the statement defined as `name` with `parameters`, calls `row` for each row, and
    /// returns the rows it affected.
    @discardableResult
    func run(
        _ name: String, _ parameters: [Value], row: (Row) throws(JournalError) -> Void = { _ in }
    ) throws(JournalError) -> Int {
        try ensureConnected()
        let sql = try prepare(name)
        let values = parameters.map(\.binary)
        let lengths = values.map { Int32($0?.count ?? 0) }
        let formats = [Int32](repeating: 1, count: values.count)
        let result = try exchange(sql) { handle in
            Self.withCStrings(values) { pointers in
                PQsendQueryPrepared(handle, name, Int32(values.count), pointers, lengths, formats, 1)
            }
        }
        defer { PQclear(result) }
        guard let result else { return 0 }
        for index in 0..<PQntuples(result) {
            try row(Row(result: result, index: index))
        }
        return Self.affected(result)
    }

    /// Runs the statements `calls` names, in order, in one round trip (libpq's pipeline mode)
    /// instead of one each; returns the rows each affected. Inside a transaction the first
    /// failure aborts it: the rest are skipped and it is thrown.
    func runPipelined(_ calls: [(name: String, parameters: [Value])]) throws(JournalError) -> [Int] {
        try ensureConnected()
        for name in Set(calls.map(\.name)) { _ = try prepare(name) }
        guard PQenterPipelineMode(handle) == 1 else {
            throw .failed(path: store, operation: "enter pipeline mode", reason: said(PQerrorMessage(handle)))
        }
        var sent = 0
        for call in calls {
            let values = call.parameters.map(\.binary)
            let lengths = values.map { Int32($0?.count ?? 0) }
            let formats = [Int32](repeating: 1, count: values.count)
            let queued = Self.withCStrings(values) { pointers in
                PQsendQueryPrepared(handle, call.name, Int32(values.count), pointers, lengths, formats, 1)
            }
            guard queued == 1 else { break }
            sent += 1
        }
        let synced = PQpipelineSync(handle) == 1
        // What libpq could not send at once goes while results are read (a silent server throws
        // here: the session is given up, pipeline and all).
        try flush()
        var counts: [Int] = []
        counts.reserveCapacity(calls.count)
        var failure: JournalError?
        for call in calls.prefix(sent) {
            // A query's result, then the NULL that ends its results.
            let result = try nextResult()
            do {
                try check(result, operation: statements[call.name]?.sql ?? call.name)
            } catch {
                failure = failure ?? error
            }
            counts.append(result.map(Self.affected) ?? 0)
            PQclear(result)
            guard result != nil else { break }  // the connection is gone: nothing more comes
            while let extra = try nextResult() { PQclear(extra) }
        }
        // Up to the sync point (none comes from a connection that broke).
        while synced, let result = try nextResult() {
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        PQexitPipelineMode(handle)
        if let failure { throw failure }
        if sent < calls.count || !synced {
            broken = true
            throw .cannotConnect(store: store, reason: said(PQerrorMessage(handle)))
        }
        return counts
    }

    /// Sends one command (`send` queues it on the session) and reads its results: returns the
    /// last (the caller clears it) after checking each, the first failure thrown once all are in.
    private func exchange(
        _ operation: String, _ send: (OpaquePointer?) -> Int32
    ) throws(JournalError) -> OpaquePointer? {
        guard send(handle) == 1 else {
            broken = true
            throw .cannotConnect(store: store, reason: said(PQerrorMessage(handle)))
        }
        try flush()
        var last: OpaquePointer?
        var failure: JournalError?
        do throws(JournalError) {
            while let result = try nextResult() {
                PQclear(last)
                last = result
                do {
                    try check(result, operation: operation)
                } catch {
                    failure = failure ?? error
                }
            }
        } catch {
            PQclear(last)
            throw error
        }
        if let failure {
            PQclear(last)
            throw failure
        }
        // No result at all: the connection broke before the first came.
        if last == nil { try check(nil, operation: operation) }
        return last
    }

    /// Sends what libpq still holds of the commands queued, reading meanwhile whatever the
    /// server answers (it may stop reading until its results are read).
    private func flush() throws(JournalError) {
        while true {
            let pending = PQflush(handle)
            if pending == 0 { return }
            guard pending == 1 else { throw lostSession() }
            try awaitServer(orWritable: true)
            guard PQconsumeInput(handle) == 1 else { throw lostSession() }
        }
    }

    /// The next result of the commands sent, or `nil` at the end of one command's results,
    /// waiting for the server at most ``silenceBound`` at a time.
    private func nextResult() throws(JournalError) -> OpaquePointer? {
        while PQisBusy(handle) == 1 {
            try awaitServer(orWritable: false)
            // A closed connection: libpq then returns an error result, and `check` says so.
            guard PQconsumeInput(handle) == 1 else {
                broken = true
                break
            }
        }
        return PQgetResult(handle)
    }

    /// Waits until the session's socket is readable (or writable, if asked) for at most
    /// ``silenceBound``; a server that stays silent that long ends the session.
    private func awaitServer(orWritable: Bool) throws(JournalError) {
        let events = Int16(POLLIN) | (orWritable ? Int16(POLLOUT) : 0)
        var descriptor = pollfd(fd: PQsocket(handle), events: events, revents: 0)
        let deadline = ContinuousClock.now + silenceBound
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { break }
            let (seconds, attoseconds) = left.components
            let milliseconds = Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&descriptor, 1, milliseconds)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw lostSession() }
        }
        broken = true
        let (seconds, attoseconds) = silenceBound.components
        let bound = Double(seconds) + Double(attoseconds) / 1e18
        throw foundUnreachable(
            .cannotConnect(
                store: store,
                reason:
                    "the server did not answer for \(bound) s (it hangs, or the network drops what it sends); the session was given up, and until it answers, the store is tried again at most every \(bound / 2) s"
            ))
    }

    /// The session ended under a call: the next use connects again.
    private func lostSession() -> JournalError {
        broken = true
        return .cannotConnect(store: store, reason: said(PQerrorMessage(handle)))
    }

    /// Prepares the statement defined as `name` on the server, once a session; returns its SQL.
    private func prepare(_ name: String) throws(JournalError) -> String {
        guard let statement = statements[name] else {
            preconditionFailure("statement \(name) used before it was defined")
        }
        if !prepared.contains(name) {
            PQclear(
                try exchange(statement.sql) {
                    PQsendPrepare($0, name, statement.sql, Int32(statement.types.count), statement.types)
                })
            prepared.insert(name)
        }
        return statement.sql
    }

    /// The rows a command affected (or a query returned).
    private static func affected(_ result: OpaquePointer) -> Int {
        Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Passes the values' bytes as the C array of pointers libpq takes (NULL for SQL NULL).
    private static func withCStrings<R>(
        _ values: [[UInt8]?], _ body: ([UnsafePointer<CChar>?]) -> R
    ) -> R {
        var pointers: [UnsafePointer<CChar>?] = []
        var buffers: [UnsafeMutableRawBufferPointer] = []
        defer { buffers.forEach { $0.deallocate() } }
        for value in values {
            guard let value else {
                pointers.append(nil)
                continue
            }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, value.count), alignment: 1)
            buffer.copyBytes(from: value)
            buffers.append(buffer)
            pointers.append(UnsafePointer(buffer.baseAddress!.assumingMemoryBound(to: CChar.self)))
        }
        return body(pointers)
    }

    /// The typed error for a failed command: the server's words, or a lost connection.
    private func check(_ result: OpaquePointer?, operation: String) throws(JournalError) {
        let status = result.map { PQresultStatus($0) } ?? PGRES_FATAL_ERROR
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK, status != PGRES_EMPTY_QUERY else { return }
        var reason = result.map { said(PQresultErrorMessage($0)) } ?? ""
        if reason.isEmpty { reason = handle.map { said(PQerrorMessage($0)) } ?? "no connection" }
        let state = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) }
        let severity = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "V"))) }.map { String(cString: $0) }
        // A FATAL error ends the session (the server shut down or crashed: "terminating
        // connection due to …"), as does a connection exception (08…) or an operator
        // intervention (57P…), though libpq may not have seen the socket close yet.
        if severity == "FATAL" || severity == "PANIC" || state?.hasPrefix("08") == true
            || state?.hasPrefix("57P") == true
        {
            broken = true
        }
        if broken || handle.map({ PQstatus($0) }) != CONNECTION_OK {
            broken = true
            throw .cannotConnect(store: store, reason: reason)
        }
        // 53100: disk full; 53400: configuration limit exceeded.
        if state == "53100" { throw .full(path: store) }
        throw .failed(path: store, operation: Self.firstWords(of: operation), reason: reason)
    }

    /// libpq's message on one line: its lines (some indented with a tab) joined with "; ".
    private static func message(_ text: UnsafePointer<CChar>?) -> String {
        guard let text else { return "" }
        return String(cString: text).split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            .joined(separator: "; ")
    }

    /// A statement's first words, enough to say which one failed.
    private static func firstWords(of sql: String) -> String {
        let words = sql.split(whereSeparator: \.isWhitespace).prefix(4)
        return "run \"" + words.joined(separator: " ") + (words.count == 4 ? " …\"" : "\"")
    }
}
