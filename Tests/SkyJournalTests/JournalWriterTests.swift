import Foundation
import Synchronization
import Testing

@testable import SkyJournal

/// The journal's thread on a real SQLite file: writes made with the next commit.
@Suite("Journal: writes with the next commit")
struct JournalWriterTests {
    static func job(_ number: UInt8) -> JobRecord {
        JobRecord(id: [UInt8](repeating: number, count: 16), service: "s", body: [], expiresAt: 0)
    }

    static func start(_ folder: SQLiteJobStoreTests.Folder, delay: Duration) async throws -> JournalWriter {
        let path = folder.journal
        return try await JournalWriter.start(unhurriedDelay: delay) { () throws(JournalError) in
            try SQLiteJobStore(path: path)
        }
    }

    /// Queues an unhurried write (before returning); its completion comes on the stream.
    static func writeWithNextCommit(
        _ writer: JournalWriter, _ changes: [JobChange]
    ) -> AsyncStream<Result<JournalReceipt, JournalError>> {
        let (completion, done) = AsyncStream.makeStream(of: Result<JournalReceipt, JournalError>.self)
        writer.writeWithNextCommit(changes) { result in
            done.yield(result)
            done.finish()
        }
        return completion
    }

    @Test func anUnhurriedWriteJoinsTheNextWritesCommit() async throws {
        let folder = try SQLiteJobStoreTests.Folder()
        let writer = try await Self.start(folder, delay: .seconds(60))
        let completion = Self.writeWithNextCommit(writer, [.submitted(Self.job(1))])
        // The thread has seen the write and waits (60 s) without having committed it.
        await writer.untilIdle()
        #expect(writer.commits == 0)
        try await writer.write([.submitted(Self.job(2))])
        var results = completion.makeAsyncIterator()
        // Its completion ran on the journal's thread before the later write's (one commit).
        _ = try #require(await results.next()).get()
        #expect(writer.commits == 1)
        await writer.stop()
    }

    @Test(.timeLimit(.minutes(1)))
    func anUnhurriedWriteAloneIsCommittedOnceItWaitedItsDelay() async throws {
        let folder = try SQLiteJobStoreTests.Folder()
        let writer = try await Self.start(folder, delay: .milliseconds(300))
        let queued = ContinuousClock.now
        for await result in Self.writeWithNextCommit(writer, [.submitted(Self.job(1))]) { _ = try result.get() }
        let waited = ContinuousClock.now - queued
        print("an unhurried write alone was committed after \(waited)")
        #expect(waited >= .milliseconds(290))
        #expect(writer.commits == 1)
        await writer.stop()
    }

    @Test(.timeLimit(.minutes(1)))
    func aFlushCommitsAnUnhurriedWriteAtOnceAndAStopCommitsWhatWaits() async throws {
        let folder = try SQLiteJobStoreTests.Folder()
        let writer = try await Self.start(folder, delay: .seconds(3600))
        let completion = Self.writeWithNextCommit(writer, [.submitted(Self.job(1))])
        writer.flush()
        for await result in completion { _ = try result.get() }
        #expect(writer.commits == 1)

        let stopped = Mutex<Result<JournalReceipt, JournalError>?>(nil)
        writer.writeWithNextCommit([.submitted(Self.job(2))]) { result in stopped.withLock { $0 = result } }
        await writer.stop()
        let result = try #require(stopped.withLock { $0 })
        _ = try result.get()
        let reopened = try SQLiteJobStore(path: folder.journal)
        #expect(try reopened.unfinished().map(\.id) == [Self.job(1).id, Self.job(2).id])
    }
}
