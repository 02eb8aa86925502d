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
        JobRecord(
            id: [UInt8](repeating: number, count: 16), service: "sky.echo", body: Array("task \(number)".utf8),
            priority: priority, notBefore: 1_000 * Int64(number), idempotencyKey: key, expiresAt: 86_400_000)
    }

    @Test func unfinishedJobsAndOutcomesSurviveReopeningInSubmitOrder() throws {
        let folder = try Folder()
        do {
            let store = try SQLiteJobStore(path: folder.journal)
            try store.apply((1...5).map { .submitted(Self.job($0, priority: Int($0) % 2)) })
            try store.apply([.started(id: Self.job(2).id, attempt: 1)])
            try store.apply([.finished(id: Self.job(3).id, state: .succeeded, outcome: [42], expiresAt: 99)])
        }
        let store = try SQLiteJobStore(path: folder.journal)
        let unfinished = try store.unfinished()
        #expect(unfinished.map { $0.id[0] } == [1, 2, 4, 5])
        #expect(unfinished[0] == Self.job(1, priority: 1), "every field as written")
        #expect(unfinished[1].state == .running && unfinished[1].attempt == 1)
        let done = try #require(try store.job(Self.job(3).id))
        #expect(done.state == .succeeded && done.outcome == [42] && done.expiresAt == 99)
        #expect(try store.job([UInt8](repeating: 9, count: 16)) == nil)
    }

    @Test func aRetryBackoffIsKeptAsANotBeforeAndNeverReopensAnEndedJob() throws {
        let folder = try Folder()
        do {
            let store = try SQLiteJobStore(path: folder.journal)
            try store.apply([.submitted(Self.job(1)), .submitted(Self.job(2))])
            try store.apply([.started(id: Self.job(1).id, attempt: 1), .started(id: Self.job(2).id, attempt: 1)])
            try store.apply([.finished(id: Self.job(2).id, state: .succeeded, outcome: [1], expiresAt: 10)])
            try store.apply([
                .rescheduled(id: Self.job(1).id, notBefore: 123_456), .rescheduled(id: Self.job(2).id, notBefore: 7),
            ])
        }
        let store = try SQLiteJobStore(path: folder.journal)
        let waiting = try #require(try store.unfinished().first)
        #expect(waiting.id == Self.job(1).id && waiting.state == .queued)
        #expect(waiting.notBefore == 123_456 && waiting.attempt == 1, "waits for its backoff; its attempt counts on")
        #expect(try store.job(Self.job(2).id)?.state == .succeeded)
    }

    @Test func aReleasedStartIsQueuedAgainWithItsAttemptTakenBackAndNeverReopensAnEndedJob() throws {
        let folder = try Folder()
        do {
            let store = try SQLiteJobStore(path: folder.journal)
            try store.apply([.submitted(Self.job(1)), .submitted(Self.job(2))])
            try store.apply([.started(id: Self.job(1).id, attempt: 3), .started(id: Self.job(2).id, attempt: 1)])
            try store.apply([.finished(id: Self.job(2).id, state: .cancelled, outcome: [1], expiresAt: 10)])
            try store.apply([.released(id: Self.job(1).id, attempt: 2), .released(id: Self.job(2).id, attempt: 0)])
        }
        let store = try SQLiteJobStore(path: folder.journal)
        let waiting = try #require(try store.unfinished().first)
        #expect(waiting.id == Self.job(1).id && waiting.state == .queued && waiting.attempt == 2)
        let ended = try #require(try store.job(Self.job(2).id))
        #expect(ended.state == .cancelled && ended.attempt == 1, "an ended job keeps what it had")
    }

    @Test func anOutcomeIsRecordedOnce() throws {
        let folder = try Folder()
        let store = try SQLiteJobStore(path: folder.journal)
        try store.apply([.submitted(Self.job(1))])
        try store.apply([.finished(id: Self.job(1).id, state: .succeeded, outcome: [1], expiresAt: 10)])
        // A late second delivery's outcome, and a restart that would deliver it again.
        try store.apply([.finished(id: Self.job(1).id, state: .failed, outcome: [2], expiresAt: 20)])
        try store.apply([.started(id: Self.job(1).id, attempt: 2)])
        let job = try #require(try store.job(Self.job(1).id))
        #expect(job.state == .succeeded && job.outcome == [1] && job.attempt == 0)
    }

    @Test func aSecondSubmitWithTheSameKeyOrIDWritesNothing() throws {
        let folder = try Folder()
        let store = try SQLiteJobStore(path: folder.journal)
        try store.apply([.submitted(Self.job(1, key: "order-7"))])
        try store.apply([.submitted(Self.job(2, key: "order-7")), .submitted(Self.job(1))])
        #expect(try store.unfinished().count == 1)
        #expect(try store.job(idempotencyKey: "order-7")?.id == Self.job(1).id)
        #expect(try store.job(idempotencyKey: "order-8") == nil)
    }

    @Test func expiredOutcomesAreDeletedInBatchesAndUnfinishedJobsNever() throws {
        let folder = try Folder()
        let store = try SQLiteJobStore(path: folder.journal)
        try store.apply((1...30).map { .submitted(Self.job($0)) })
        try store.apply(
            (1...25).map { .finished(id: Self.job($0).id, state: .succeeded, outcome: [], expiresAt: Int64($0)) })
        #expect(try store.deleteExpired(before: 21, limit: 8) == 8)
        #expect(try store.deleteExpired(before: 21, limit: 8) == 8)
        #expect(try store.deleteExpired(before: 21, limit: 8) == 4, "only the 20 that expired before 21")
        #expect(try store.deleteExpired(before: 1_000, limit: 100) == 5)
        #expect(try store.unfinished().count == 5)
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
