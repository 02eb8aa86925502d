import Foundation
import Testing

@testable import SkyJournal

/// The embedded journal on a real SQLite file in a temporary folder: what a broker that dies
/// and starts again finds, damaged files, idempotency keys, expiry, and group commit.
@Suite("Journal: a real SQLite file")
struct SQLiteJobStoreTests {
    /// A fresh folder, removed afterwards.
    final class Folder {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("sky-journal-\(UUID().uuidString)")
        var journal: String { url.appendingPathComponent("jobs.sqlite").path }

        init() throws { try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
    }

    static func job(_ number: UInt8, key: String? = nil, priority: Int = 0) -> JobRecord {
        JobStoreContract.job(number, key: key, priority: priority)
    }

    /// What every store does, on a SQLite file (``JobStoreContract``).
    @Test(arguments: JobStoreContract.allCases)
    func theStoreContract(_ contract: JobStoreContract) throws {
        let folder = try Folder()
        try contract.check { () throws(JournalError) in try SQLiteJobStore(path: folder.journal) }
    }

    /// A journal written before outcomes recorded their times gets the two columns when
    /// opened: its jobs are read (times 0, unknown), and new outcomes keep their times.
    @Test func aJournalWithoutTheTimesGetsThemAndKeepsItsJobs() throws {
        let folder = try Folder()
        do {
            let old = try SQLiteDatabase(path: folder.journal)
            try old.execute(
                """
                CREATE TABLE sky_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                INSERT INTO sky_meta VALUES ('format', '\(SQLiteJobStore.format)');
                CREATE TABLE jobs (
                    seq INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, service TEXT NOT NULL, body BLOB NOT NULL,
                    priority INTEGER NOT NULL, not_before INTEGER NOT NULL, idempotency_key TEXT UNIQUE,
                    state INTEGER NOT NULL, attempt INTEGER NOT NULL, outcome BLOB, expires_at INTEGER NOT NULL,
                    submitted_at INTEGER NOT NULL, options BLOB NOT NULL);
                INSERT INTO jobs VALUES (1, x'01', 'echo', x'02', 0, 0, NULL, 2, 1, x'00', 99, 5, x'');
                INSERT INTO jobs VALUES (2, x'03', 'echo', x'02', 0, 0, NULL, 0, 0, NULL, 99, 6, x'');
                """)
        }
        let store = try SQLiteJobStore(path: folder.journal)
        let ended = try #require(try store.job([1]))
        #expect(ended.state == .succeeded && ended.startedAt == 0 && ended.endedAt == 0)
        try store.apply([.finished(id: [3], state: .failed, outcome: [1], expiresAt: 99, startedAt: 7, endedAt: 8)])
        #expect(try store.job([3]).map { [$0.startedAt, $0.endedAt] } == [7, 8])
    }

    /// A crash in the middle of a commit leaves a torn write at the end of the WAL: the journal
    /// opens, keeps every committed job and drops the torn one. The crash is a copy of the files
    /// taken while the store is open (what the disk holds at that moment), then cut short.
    @Test func aTornLastWriteLosesOnlyTheTornTransaction() throws {
        let folder = try Folder()
        let crashed = folder.url.appendingPathComponent("crashed.sqlite").path
        let store = try SQLiteJobStore(path: folder.journal)
        try store.apply((1...10).map { .submitted(Self.job($0)) })
        try store.apply([.submitted(Self.job(11))])
        let wal = try Data(contentsOf: URL(fileURLWithPath: folder.journal + "-wal"))
        try FileManager.default.copyItem(atPath: folder.journal, toPath: crashed)
        // The last transaction's frame, cut in half.
        try wal.prefix(wal.count - 2_000).write(to: URL(fileURLWithPath: crashed + "-wal"))
        let recovered = try SQLiteJobStore(path: crashed)
        #expect(try recovered.unfinished().map { $0.id[0] } == Array(1...10))
    }

    @Test func aGarbageFileIsRefusedNamingIt() throws {
        let folder = try Folder()
        try Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(
            to: URL(fileURLWithPath: folder.journal))
        let error = #expect(throws: JournalError.self) { try SQLiteJobStore(path: folder.journal) }
        guard case .corrupt(let path, _) = error else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(path == folder.journal)
        print("garbage journal: \(error!)")
        #expect("\(error!)".contains("Move it aside"))
    }

    @Test func aTruncatedFileIsRefusedNamingIt() throws {
        let folder = try Folder()
        do {
            let store = try SQLiteJobStore(path: folder.journal)
            try store.apply((1...200).map { .submitted(Self.job(UInt8($0))) })
        }
        let data = try Data(contentsOf: URL(fileURLWithPath: folder.journal))
        try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: folder.journal))
        let error = #expect(throws: JournalError.self) {
            let store = try SQLiteJobStore(path: folder.journal)
            _ = try store.unfinished()
        }
        guard case .corrupt(let path, _) = error else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(path == folder.journal)
        print("truncated journal: \(error!)")
    }

    @Test func aDatabaseOfSomethingElseIsRefused() throws {
        let folder = try Folder()
        do {
            let other = try SQLiteDatabase(path: folder.journal)
            try other.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
        }
        let error = #expect(throws: JournalError.self) { try SQLiteJobStore(path: folder.journal) }
        #expect("\(String(describing: error))".contains("something else (tables: invoices)"))
    }

    @Test func aMissingFolderIsNamed() {
        let path = "/nonexistent-\(UUID().uuidString)/jobs.sqlite"
        let error = #expect(throws: JournalError.self) { try SQLiteJobStore(path: path) }
        guard case .cannotOpen(let named, _) = error else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(named == path)
    }

    /// Many writers at once: every write is acknowledged once, durable, and they share
    /// transactions (one fsync for many jobs).
    @Test func concurrentWritesShareTransactions() async throws {
        let folder = try Folder()
        let path = folder.journal
        let writer = try await JournalWriter.start { () throws(JournalError) in try SQLiteJobStore(path: path) }
        let count = 2_000
        try await withThrowingTaskGroup(of: Void.self) { group in
            for number in 0..<count {
                group.addTask {
                    var id = [UInt8](repeating: 0, count: 16)
                    id[0] = UInt8(number & 0xFF)
                    id[1] = UInt8(number >> 8)
                    let job = JobRecord(id: id, service: "s", body: [], expiresAt: 0)
                    try await writer.write([.submitted(job)])
                }
            }
            try await group.waitForAll()
        }
        let stored = try await writer.read { store throws(JournalError) in try store.unfinished().count }
        #expect(stored == count)
        let commits = writer.commits
        print("\(count) concurrent writes in \(commits) transactions")
        #expect(commits < count / 2, "\(commits) transactions")
        await writer.stop()
        await writer.stop()
        await #expect(throws: JournalError.self) { try await writer.write([]) }
    }

    @Test func aStoreThatCannotOpenFailsTheStart() async {
        let error = await #expect(throws: JournalError.self) {
            _ = try await JournalWriter.start { () throws(JournalError) in
                try SQLiteJobStore(path: "/nonexistent-\(UUID().uuidString)/jobs.sqlite")
            }
        }
        if case .cannotOpen = error {} else { Issue.record("\(String(describing: error))") }
    }

    /// A steady load whose outcomes expire: the file stops growing once deleted pages are reused
    /// and the WAL is truncated after checkpoints.
    @Test func aSteadyLoadWithExpiryKeepsTheFileAtASteadySize() throws {
        let folder = try Folder()
        let store = try SQLiteJobStore(path: folder.journal)
        var sizes: [Int] = []
        for round in 0..<30 {
            let jobs = (0..<2000).map { index in
                JobRecord(
                    id: Array(withUnsafeBytes(of: (UInt64(round), UInt64(index))) { Array($0) }), service: "sky.echo",
                    body: [UInt8](repeating: 7, count: 64), expiresAt: 0)
            }
            try store.apply(jobs.map { .submitted($0) })
            try store.apply(jobs.map { .started(id: $0.id, attempt: 1) })
            // Each round's outcomes expire at the next round.
            try store.apply(
                jobs.map {
                    .finished(
                        id: $0.id, state: .succeeded, outcome: [UInt8](repeating: 9, count: 65), expiresAt: Int64(round)
                    )
                })
            while try store.deleteExpired(before: Int64(round), limit: 1000) > 0 {}
            sizes.append(try store.byteCount())
        }
        print(
            "journal bytes after rounds 5, 10, 20, 30 of 2,000 jobs each: \(sizes[4]), \(sizes[9]), \(sizes[19]), \(sizes[29])"
        )
        #expect(sizes[29] <= sizes[9] + sizes[9] / 5, "\(sizes)")
    }
}
