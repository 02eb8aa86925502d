import Foundation
import Logging
import SkyJournal

/// The broker's state directory: the job journal and the lock that keeps a second broker off it.
///
/// Two brokers on one journal would each run the other's jobs; the second one is refused at
/// start, naming the directory, by an exclusive `flock` on `broker.lock` (released by the
/// kernel when the process dies, so a `kill -9` leaves no stale lock).
final class StateDirectory: OpenedJournal {
    let path: String
    let writer: JournalWriter
    /// Jobs the journal held unfinished when it was opened.
    let unfinished: [JobRecord]
    let settings: JournalSettings
    private let lock: Int32

    private init(path: String, writer: JournalWriter, unfinished: [JobRecord], settings: JournalSettings, lock: Int32) {
        self.path = path
        self.writer = writer
        self.unfinished = unfinished
        self.settings = settings
        self.lock = lock
    }

    /// Makes the directory if needed, takes its lock, opens the journal and reads what is
    /// unfinished.
    /// - Throws: ``BrokerStartError`` naming the directory or file and what to do.
    static func open(_ path: String, logger: Logger) async throws -> StateDirectory {
        if let problem = makeDirectory(path) {
            throw BrokerStartError(
                role: "journal", endpoint: path,
                reason: "cannot make the state directory \(path): \(problem); pick another with --state-dir")
        }
        let lockPath = (path as NSString).appendingPathComponent("broker.lock")
        let lock = Foundation.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard lock >= 0 else {
            throw BrokerStartError(
                role: "journal", endpoint: path,
                reason: "cannot open \(lockPath): \(String(cString: strerror(errno))); pick another --state-dir")
        }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            Foundation.close(lock)
            throw BrokerStartError(
                role: "journal", endpoint: path,
                reason:
                    "another skybroker uses the state directory \(path) (it holds \(lockPath)); stop it, or give this one its own --state-dir"
            )
        }
        let file = (path as NSString).appendingPathComponent(BrokerConfiguration.journalFileName)
        do {
            let (writer, unfinished, settings) = try await JournalWriter.startReading(
                named: ("file", absolute(file)), logger: logger
            ) {
                () throws(JournalError) in try SQLiteJobStore(path: file)
            }
            return StateDirectory(path: path, writer: writer, unfinished: unfinished, settings: settings, lock: lock)
        } catch {
            Foundation.close(lock)
            throw BrokerStartError(role: "journal", endpoint: file, reason: "\(error)")
        }
    }

    /// `path` from the root: relative paths are taken from the working directory.
    private static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        let directory = FileManager.default.currentDirectoryPath
        return URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: directory, isDirectory: true))
            .standardizedFileURL.path
    }

    /// `mkdir -p path`; what went wrong, naming the part of the path it went wrong at, if it
    /// did. (Foundation's `createDirectory` said "NSCocoaErrorDomain error 512" for a path
    /// under a file.)
    private static func makeDirectory(_ path: String) -> String? {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + component
            if mkdir(prefix, 0o755) == 0 { continue }
            let failure = errno
            var status = stat()
            guard failure == EEXIST, stat(prefix, &status) == 0 else {
                return "\(prefix): \(String(cString: strerror(failure)))"
            }
            if status.st_mode & S_IFMT != S_IFDIR { return "\(prefix) is a file, not a directory" }
        }
        return nil
    }

    /// The flock is this process's until it ends: the journal cannot be lost to another broker.
    var lost: AsyncStream<JournalError>? { nil }
    var epoch: Int64? { nil }
    func announce(_ name: String) async {}
    var stallGuard: (@Sendable (Duration) -> Bool)? { nil }
    var storeAnswers: (@Sendable () -> Bool)? { nil }

    /// Commits what is queued, stops the journal's thread, and frees the lock.
    func close() async {
        await writer.stop()
        Foundation.close(lock)
    }
}
