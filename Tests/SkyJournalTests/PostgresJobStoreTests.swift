import Foundation
import SkyJournal
import SkyTestSupport
import SkyZMQ
import Testing

@testable import SkyPostgres

/// The job store on a real PostgreSQL server (Debian's, started by each test in a temporary
/// directory on a free loopback port): the same contract as the SQLite journal, one broker per
/// store, schema versions, a server that restarts, and errors that name the store. One test at
/// a time: each makes a cluster (`initdb`), which beside the rest of the suite's start took
/// both cores long enough to fail other tests' timing bounds.
@Suite("Journal: a real PostgreSQL server", .serialized)
struct PostgresJobStoreTests {
    /// What every store does, on PostgreSQL (``JobStoreContract``).
    @Test(arguments: JobStoreContract.allCases)
    func theStoreContract(_ contract: JobStoreContract) async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        // Each reopening waits for the last session's lock, as `open(_:within:)` does: a loaded
        // server ends a closed session late (a case once found the store "in use").
        try contract.check { () throws(JournalError) in try Self.openBlocking(uri, within: .seconds(10)) }
        await server.stop()
    }

    @Test func aSecondBrokerOnTheSameStoreIsRefusedNamingItUntilTheFirstIsGone() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        do {
            let first = try PostgresJobStore(uri: uri)
            #expect(throws: JournalError.inUse(store: uri)) { try PostgresJobStore(uri: uri) }
            try first.apply([.submitted(JobStoreContract.job(1))])
        }
        // The first broker's session ended: its lock goes with it once the server has ended the
        // session, which it does after the client's close, not with it (a fresh clone's run on a
        // loaded machine found the lock still held): the second waits for that, a few seconds at
        // most, as a standby would.
        let second = try await Self.open(uri, within: .seconds(10))
        #expect(try second.unfinished().count == 1)
        await server.stop()
    }

    /// Opens the store once the server has ended the session that held its lock, trying
    /// again while it is in use.
    static func open(_ uri: String, within limit: Duration) async throws -> PostgresJobStore {
        let deadline = ContinuousClock.now + limit
        while true {
            let result: Result<PostgresJobStore, JournalError> = Result { () throws(JournalError) in
                try PostgresJobStore(uri: uri)
            }
            if case .failure(.inUse) = result, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))  // the lock's release has no event to await
                continue
            }
            return try result.get()
        }
    }

    /// ``open(_:within:)`` for the store contract, whose cases are synchronous: its thread
    /// sleeps between tries (the lock's release has no event to await).
    static func openBlocking(_ uri: String, within limit: Duration) throws(JournalError) -> PostgresJobStore {
        let deadline = ContinuousClock.now + limit
        while true {
            do {
                return try PostgresJobStore(uri: uri)
            } catch {
                guard case .inUse = error, ContinuousClock.now < deadline else { throw error }
                Thread.sleep(forTimeInterval: 0.02)  // the lock's release has no event to await
            }
        }
    }

    /// A store opened on another thread, handed over once that thread is done with it.
    struct Handover: @unchecked Sendable {  // the opening thread never touches the store again.
        let result: Result<PostgresJobStore, JournalError>
    }

    /// Opens a store on a thread of its own (a standby's wait blocks, as on the journal's
    /// thread) and returns it once open.
    static func openOnAThread(
        _ uri: String, standby: PostgresJobStore.Standby, lost: (@Sendable (JournalError) -> Void)? = nil
    ) async -> Handover {
        await withCheckedContinuation { done in
            Thread {
                done.resume(
                    returning: Handover(
                        result: Result { () throws(JournalError) in
                            try PostgresJobStore(uri: uri, standby: standby, lost: lost)
                        }))
            }.start()
        }
    }

    /// Every transaction checks the store's epoch first: after another broker took the store
    /// (a newer epoch), a write changes nothing, fails `fenced`, and the broker is told.
    @Test func aWriteAfterAnotherBrokerTookTheStoreIsFencedAndChangesNothing() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        let told = Locked<[JournalError]>([])
        let store = try PostgresJobStore(uri: uri) { error in told.withLock { $0.append(error) } }
        try store.apply([.submitted(JobStoreContract.job(1))])
        try await server.execute("UPDATE sky_lease SET epoch = epoch + 1")
        #expect(throws: JournalError.fenced(store: uri)) {
            try store.apply([.submitted(JobStoreContract.job(2)), .started(id: JobStoreContract.job(1).id, attempt: 1)])
        }
        #expect(throws: JournalError.fenced(store: uri)) { try store.renewLease() }
        #expect(told.withLock { $0 }.first == .fenced(store: uri))
        #expect(try await server.query("SELECT count(*), max(state) FROM sky_jobs") == ["1|0"])
        await server.stop()
    }

    /// A standby waits while the active broker's session lives, saying who is active, and takes
    /// the store with the next epoch once that session ends (a `kill -9` ends it at once).
    @Test(.timeLimit(.minutes(1)))
    func aStandbyWaitsAndTakesTheStoreWhenTheActiveSessionEnds() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        let (seen, seeing) = AsyncStream.makeStream(of: PostgresJobStore.Lease.self)
        var active: PostgresJobStore? = try PostgresJobStore(
            uri: uri, standby: .init(name: "broker a", poll: .milliseconds(20)))
        let firstEpoch = try #require(active?.currentEpoch)
        let standby = Task {
            await Self.openOnAThread(
                uri, standby: .init(name: "broker b", poll: .milliseconds(20), waiting: { seeing.yield($0) }))
        }
        var iterator = seen.makeAsyncIterator()
        let lease = try #require(await iterator.next())
        #expect(lease.epoch == firstEpoch && lease.holder == "broker a")
        active = nil  // its session ends
        let taken = try await standby.value.result.get()
        #expect(taken.currentEpoch == firstEpoch + 1)
        #expect(try await server.query("SELECT holder FROM sky_lease") == ["broker b"])
        _ = active
        await server.stop()
    }

    /// An active broker that stops renewing its lease (frozen, or cut off) has its session
    /// ended by a standby once the lease lapsed, by the active broker's `takeoverAfter` (a
    /// standby started with a shorter one deposed a healthy broker); its next use of the store
    /// finds the lock taken: it is told it was fenced, and writes nothing.
    @Test(.timeLimit(.minutes(1)))
    func aStandbyEndsTheSessionOfAnActiveBrokerWhoseLeaseLapsed() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        let told = Locked<[JournalError]>([])
        let active = PostgresJobStore.Standby(name: "silent", takeoverAfter: .seconds(1))
        let start = ContinuousClock.now
        let silent = try PostgresJobStore(uri: uri, standby: active) { error in
            told.withLock { $0.append(error) }
        }
        let evictions = Locked<[Bool]>([])
        // A standby set to take over sooner (0.2 s): the active broker's own setting counts.
        let standby = PostgresJobStore.Standby(
            name: "standby", takeoverAfter: .milliseconds(200), poll: .milliseconds(20),
            evicted: { _, ended in evictions.withLock { $0.append(ended) } })
        let taken = try await Self.openOnAThread(uri, standby: standby).result.get()
        let took = start.duration(to: .now)
        #expect(took >= active.lapseAfter && took < active.takeoverAfter * 2, "took over after \(took)")
        #expect(evictions.withLock { $0 }.first == true)
        #expect(throws: JournalError.fenced(store: uri)) { try silent.apply([.submitted(JobStoreContract.job(1))]) }
        #expect(told.withLock { $0 } == [.fenced(store: uri)])
        try taken.apply([.submitted(JobStoreContract.job(2))])
        #expect(try await server.query("SELECT count(*) FROM sky_jobs") == ["1"])
        await server.stop()
    }

    /// A store made by a broker of schema version 1 (no lease columns) is brought up to the
    /// current version, its jobs kept.
    @Test func aVersionOneStoreIsMigratedAndKeepsItsJobs() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        try await server.execute(PostgresJobStore.version1)
        try await server.execute(
            "INSERT INTO sky_jobs (id, service, body, priority, not_before, state, attempt, expires_at, submitted_at, options) VALUES ('\\x01', 'echo', '\\x02', 0, 0, 0, 0, 0, 0, '\\x')"
        )
        let store = try PostgresJobStore(uri: uri)
        #expect(try store.unfinished().map(\.id) == [[1]])
        #expect(try await server.query("SELECT max(version) FROM sky_schema") == ["\(PostgresJobStore.schemaVersion)"])
        #expect(try store.pausedServices().isEmpty, "version 4's table is there")
        #expect(try await server.query("SELECT holder_pid <> 0 FROM sky_lease") == ["t"])
        await server.stop()
    }

    @Test func aNewerSchemaIsRefusedNamingBothVersions() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        do {
            _ = try PostgresJobStore(uri: uri)
            let connection = try PostgresConnection(uri: uri, silenceBound: .seconds(2))
            try connection.execute("INSERT INTO sky_schema (version) VALUES (99)")
        }
        let error = #expect(throws: JournalError.self) { try PostgresJobStore(uri: uri) }
        #expect(error == .newerSchema(store: uri, found: 99, known: PostgresJobStore.schemaVersion))
        #expect(
            error?.description.contains("schema version 99, newer than this broker's \(PostgresJobStore.schemaVersion)")
                == true)
        await server.stop()
    }

    /// A database with a table of Sky's names that Sky did not make is refused; a user that
    /// may not create tables is told what to grant.
    @Test func tablesSkyDidNotMakeAreRefusedAndAUserWhoMayNotCreateThemIsToldWhatToGrant() async throws {
        let server = try await PostgresServer.start()
        try await server.execute("CREATE TABLE sky_jobs (x int)")
        let foreign = #expect(throws: JournalError.self) { try PostgresJobStore(uri: server.uri()) }
        #expect(foreign?.description.contains("tables named like Sky's") == true, "\(String(describing: foreign))")
        try await server.execute("CREATE DATABASE other")
        try await server.execute("CREATE ROLE reader LOGIN")
        let uri = "postgresql://reader@127.0.0.1:\(server.port)/other"
        let denied = #expect(throws: JournalError.self) { try PostgresJobStore(uri: uri) }
        #expect(
            denied?.description.contains("GRANT CREATE ON SCHEMA public") == true, "\(String(describing: denied))")
        try await server.execute("GRANT CREATE ON SCHEMA public TO reader", database: "other")
        _ = try PostgresJobStore(uri: uri)
        await server.stop()
    }

    /// What opening a store at `uri` fails with, as said ("" if it opened).
    static func refusal(of uri: String) -> String {
        let error = #expect(throws: JournalError.self) { try PostgresJobStore(uri: uri) }
        return error?.description ?? ""
    }

    /// A server that is not there is named, with what to check, and without the URI's password.
    @Test func anUnreachableServerIsNamedWithoutItsPassword() throws {
        let port = try freeLoopbackPort()
        let text = Self.refusal(of: "postgresql://sky:hunter2@127.0.0.1:\(port)/jobs")
        #expect(text.contains("postgresql://sky:***@127.0.0.1:\(port)/jobs"), "\(text)")
        #expect(text.contains("Connection refused"), "\(text)")
        #expect(!text.contains("hunter2"), "\(text)")
    }

    /// A password short enough to be in every other word (`e`), or cut at an `@` into a piece
    /// that is (`ss`): the message and the store's name read as written. Each occurrence was
    /// replaced: "postgr***sql", "Conn***ction r***fus***d", "addre***", which also showed the
    /// password.
    @Test func aShortPasswordTakesNothingElseOutOfTheMessage() throws {
        let port = try freeLoopbackPort()
        let text = Self.refusal(of: "postgresql://sky:e@127.0.0.1:\(port)/sky")
        #expect(text.contains("postgresql://sky:***@127.0.0.1:\(port)/sky"), "\(text)")
        #expect(text.contains("Connection refused") && text.contains("server"), "\(text)")
        let cut = "postgresql://sky:p@ss@127.0.0.1:\(port)/sky"
        let cutText = Self.refusal(of: cut)
        #expect(!cutText.contains("p@ss") && !cutText.contains("\"ss@"), "\(cutText)")
        #expect(!cutText.contains("addre***"), "\(cutText)")
        #expect(PostgresJobStore.redacted(cut) == "postgresql://sky:***@127.0.0.1:\(port)/sky")
    }

    /// Passwords libpq quotes back in its errors (a URI it cannot parse, a password cut at an
    /// `@`), passwords in the query (repeated, or under a percent-encoded key): none appears
    /// in an error or in the store's name.
    @Test(arguments: [
        ("postgresql://u:hun%zzter2@127.0.0.1:PORT/db", ["hun%zzter2", "zzter2"]),
        ("postgresql://u@127.0.0.1:PORT/db?password=%zzsecret", ["zzsecret"]),
        ("postgresql://u@127.0.0.1:PORT/db?password=first1&password=second2", ["first1", "second2"]),
        ("postgresql://u@127.0.0.1:PORT/db?pass%77ord=hunter3", ["hunter3"]),
        ("postgresql://u:hun@ter4@127.0.0.1:PORT/db", ["hun@ter4", "ter4"]),
        ("postgresql://u:secret5@[::1:PORT/db", ["secret5"]),
    ])
    func noPasswordIsEverSaid(uri: String, secrets: [String]) throws {
        let uri = uri.replacingOccurrences(of: "PORT", with: "\(try freeLoopbackPort())")
        let error = #expect(throws: JournalError.self) { try PostgresJobStore(uri: uri) }
        for said in [error?.description ?? "", PostgresJobStore.redacted(uri)] {
            for secret in secrets { #expect(!said.contains(secret), "\(said)") }
        }
    }

    /// The server crashes and comes back: the next write reaches it on a new session (with the
    /// store's lock taken again) and nothing written before is lost.
    @Test(.timeLimit(.minutes(1)))
    func aRestartedServerIsReachedAgainAndKeepsWhatWasCommitted() async throws {
        let server = try await PostgresServer.start()
        let store = try PostgresJobStore(uri: server.uri())
        try store.apply([.submitted(JobStoreContract.job(1))])
        try await server.restart()
        try store.apply([.submitted(JobStoreContract.job(2))])
        #expect(try store.unfinished().map { $0.id[0] } == [1, 2])
        // The lock is this store's again: another broker is refused.
        #expect(throws: JournalError.inUse(store: server.uri())) { try PostgresJobStore(uri: server.uri()) }
        await server.stop()
    }

    /// A server that hangs (every process stopped: the connection stays open, no TCP time-out
    /// fires) fails the write waiting on it after the silence bound instead of never; the next
    /// write fails at once with the same error (the writes queued behind one are answered), and
    /// one after half the bound tries to connect, for the connection's bound at most. Once the
    /// server goes on, the next write reaches it on a new session with the same epoch: the old
    /// session, which still held the lock when the new one came, is ended, and the store is not
    /// lost to another broker.
    @Test(.timeLimit(.minutes(1)))
    func aServerThatHangsFailsTheWriteWithinTheBoundAndTheStoreIsKeptOnceItGoesOn() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        let told = Locked<[JournalError]>([])
        // --takeover-after 3 s: a statement waits 1.2 s for a silent server, a connection 2 s.
        let settings = PostgresJobStore.Standby(name: "alone", takeoverAfter: .seconds(3))
        let store = try await Self.openOnAThread(uri, standby: settings) { error in
            told.withLock { $0.append(error) }
        }.result.get()
        try store.apply([.submitted(JobStoreContract.job(1))])
        let epoch = store.currentEpoch
        server.pause()
        // Whatever happens, the server goes on after 10 s: a write that never gave up would
        // otherwise block this test's thread for good (a time limit cannot end a blocking call).
        let rescue = Task {
            try await Task.sleep(for: .seconds(10))
            server.resume()
        }
        defer { rescue.cancel() }
        func timed(_ write: UInt8) -> (Duration, JournalError?) {
            let started = ContinuousClock.now
            let error = #expect(throws: JournalError.self) {
                try store.apply([.submitted(JobStoreContract.job(write))])
            }
            return (started.duration(to: .now), error)
        }
        let (first, silent) = timed(2)
        let (second, again) = timed(3)
        try await Task.sleep(for: settings.stepDownAfter / 2)  // the scenario: the server hangs on
        let (third, _) = timed(4)
        print(
            "a hung server: the write in flight failed after \(first), the next after \(second), one later (a connection) after \(third)"
        )
        #expect(silent?.description.contains("did not answer for 1.2 s") == true, "\(String(describing: silent))")
        #expect(first >= settings.stepDownAfter && first < .seconds(2.5), "\(first)")
        #expect(again == silent && second < .milliseconds(100), "\(second)")
        #expect(third >= .seconds(2) && third < .seconds(3.5), "\(third)")
        server.resume()
        try await Task.sleep(for: settings.stepDownAfter / 2)  // the scenario: the next write comes later
        try store.apply([.submitted(JobStoreContract.job(5))])
        #expect(store.currentEpoch == epoch)
        #expect(told.withLock { $0 }.isEmpty, "the store was not lost to another broker")
        #expect(try store.unfinished().map { $0.id[0] } == [1, 5])
        await server.stop()
    }

    /// A statement the server refuses (a NUL byte, which PostgreSQL's text cannot hold) fails
    /// its whole batch: nothing of it is written, the error says which statement and why, and
    /// the next batch is written on the same session.
    @Test func aRefusedStatementFailsItsWholeBatchAndTheNextOneIsWritten() async throws {
        let server = try await PostgresServer.start()
        let store = try PostgresJobStore(uri: server.uri())
        var refused = JobStoreContract.job(2)
        refused.service = "a\u{0}b"
        let batch: [JobChange] = (3...300).map { .submitted(JobStoreContract.job(UInt8($0 % 256))) }
        let error = #expect(throws: JournalError.self) {
            try store.apply([.submitted(JobStoreContract.job(1)), .submitted(refused)] + batch)
        }
        #expect(
            error?.description.contains(#"failed to run "INSERT INTO sky_jobs (id, …""#) == true,
            "\(String(describing: error))")
        #expect(error?.description.contains("invalid byte sequence") == true, "\(String(describing: error))")
        #expect(try store.jobCount() == 0)
        try store.apply([.submitted(JobStoreContract.job(1))] + batch.prefix(253))
        #expect(try store.jobCount() == 254)
        await server.stop()
    }

    /// Group commit on a server: concurrent submits share transactions (one round trip to
    /// COMMIT for many jobs), and each is written once.
    @Test func concurrentWritesShareTransactions() async throws {
        let server = try await PostgresServer.start()
        let uri = server.uri()
        let writer = try await JournalWriter.start { () throws(JournalError) in try PostgresJobStore(uri: uri) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for number in 1...200 {
                group.addTask { try await writer.write([.submitted(JobStoreContract.job(UInt8(number)))]) }
            }
            try await group.waitForAll()
        }
        #expect(try await writer.read { store throws(JournalError) in try store.jobCount() } == 200)
        #expect(writer.commits < 100, "\(writer.commits) transactions for 200 submits")
        await writer.stop()
        await server.stop()
    }
}
