import Foundation
import Logging
import Sky
import SkyTestSupport
import SkyWorkerKit
import Synchronization
import Testing

/// A job of a customer's: its handler sleeps, and writes down when it started and ended.
struct KeyedSleep: SkyTask {
    static let service = "test.keyed"
    typealias Result = Int
    var key: String
    var index: Int
    var milliseconds: Int
}

extension ThirdLineSuite {
    /// Concurrency keys on a real broker with a real SQLite journal and four workers, checked
    /// from the workers' own records: a key limited to one never runs two at once, and a key's
    /// 100 jobs submitted behind another key's 15,000 are not held up by them.
    @Suite("Concurrency keys: a limit of one over four workers, and fairness behind 15,000 jobs")
    struct ConcurrencyKeyRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// The workers' records: every start and end, in the order they happened.
        final class RunLog: Sendable {
            enum Event: Equatable { case start, end }
            struct Entry { var key: String, index: Int, event: Event }
            private let entries = Mutex<[Entry]>([])

            func add(_ key: String, _ index: Int, _ event: Event) {
                entries.withLock { $0.append(Entry(key: key, index: index, event: event)) }
            }

            /// How many events there are so far (a position in the log).
            var position: Int { entries.withLock { $0.count } }

            var all: [Entry] { entries.withLock { $0 } }

            /// The most that ran at once of any one key, and of all together.
            var most: (ofAKey: Int, inAll: Int) {
                var running: [String: Int] = [:]
                var most = (ofAKey: 0, inAll: 0)
                var inAll = 0
                for entry in all {
                    let change = entry.event == .start ? 1 : -1
                    running[entry.key, default: 0] += change
                    inAll += change
                    most = (max(most.ofAKey, running[entry.key]!), max(most.inAll, inAll))
                }
                return most
            }
        }

        /// A broker (with a SQLite journal if `journal`), the four workers of
        /// ``startWorkers(_:log:)`` and a client, for `body`; all stopped after it.
        static func withCluster(
            journal: Bool = true, _ body: (SkyClient, RunLog) async throws -> Void
        ) async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: journal ? state.arguments : [])
            defer { cluster.killAll() }
            let log = RunLog()
            let workers = await startWorkers(cluster, log: log)
            defer { for worker in workers { worker.cancel() } }
            let sky = try await SkyClient(broker: cluster.clients)
            try await body(sky, log)
            await sky.close()
            await cluster.stop()
        }

        /// Four workers of four slots each, in this process, each its own connection to the
        /// broker, recording into `log`.
        static func startWorkers(_ cluster: TestCluster, log: RunLog) async -> [Task<Void, any Error>] {
            var running: [Task<Void, any Error>] = []
            for number in 1...4 {
                let system = ScanSystem(name: "keyed-\(number)", capacity: 4)
                await system.register(KeyedSleep.self) { task in
                    log.add(task.key, task.index, .start)
                    try await Task.sleep(for: .milliseconds(task.milliseconds))  // the handler's work
                    log.add(task.key, task.index, .end)
                    return task.index
                }
                let worker = SkyWorker(
                    configuration: .init(broker: cluster.workers), system: system,
                    logger: Logger(label: "keyed-\(number)"))
                running.append(Task { try await worker.run() })
            }
            try? await cluster.waitForWorkers(4)
            return running
        }

        /// Submits `count` jobs of `key` from 50 lanes at once; returns their ids.
        static func submit(
            _ sky: SkyClient, key: String, count: Int, limit: Int? = nil, milliseconds: Int
        ) async throws -> [JobID] {
            try await withThrowingTaskGroup(of: [JobID].self) { group in
                for lane in 0..<50 {
                    group.addTask {
                        var ids: [JobID] = []
                        for index in stride(from: lane, to: count, by: 50) {
                            var options = JobOptions.besideOtherSuites
                            options.concurrencyKey = key
                            options.concurrencyLimit = limit
                            let task = KeyedSleep(key: key, index: index, milliseconds: milliseconds)
                            ids.append(try await sky.submit(task, options: options).id)
                        }
                        return ids
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
        }

        @Test(.timeLimit(.minutes(2)))
        func aKeyLimitedToOneNeverRunsTwoAtOnceOverFourWorkers() async throws {
            try await Self.withCluster { sky, log in
                // 1,000 jobs: 10 customers of 100, each limited to one at a time.
                var ids: [JobID] = []
                for key in (0..<10).map({ "customer-\($0)" }) {
                    ids += try await Self.submit(sky, key: key, count: 100, limit: 1, milliseconds: 2)
                }
                for id in ids { _ = try await sky.result(of: id, as: Int.self) }
                #expect(log.all.count == 2_000, "each of the 1,000 jobs ran once")
                let most = log.most
                #expect(most.ofAKey == 1, "never two jobs of a customer at once")
                #expect(most.inAll > 1, "customers ran side by side on the four workers: at most \(most.inAll) at once")
            }
        }

        /// Calls too: 400 calls of 8 customers limited to one each, then 2,000 calls of one key
        /// and 50 of another behind them, with no journal.
        @Test(.timeLimit(.minutes(2)))
        func callsOfAKeyLimitedToOneNeverRunTwoAtOnceAndTakeTurns() async throws {
            try await Self.withCluster(journal: false) { sky, log in try await Self.callsTakeTurns(sky, log) }
        }

        static func callsTakeTurns(_ sky: SkyClient, _ log: RunLog) async throws {
            func call(_ key: String, _ index: Int, limit: Int?) async throws -> Int {
                try await sky.scan(
                    KeyedSleep(key: key, index: index, milliseconds: 2),
                    options: ScanOptions(concurrencyKey: key, concurrencyLimit: limit))
            }
            try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<400 { group.addTask { try await call("customer-\(index % 8)", index, limit: 1) } }
                try await group.waitForAll()
            }
            #expect(log.all.count == 800 && log.most.ofAKey == 1, "never two calls of a customer at once")

            // 2,000 calls of A, then 50 of B while the service is paused, so that all of B's
            // are at the broker, behind A's, when it resumes: how fast the client sends them
            // does not count.
            let service = KeyedSleep.service
            func queued() async throws -> Int { try await sky.services().first { $0.name == service }?.queued ?? 0 }
            let backlog = Task {
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<2_000 { group.addTask { try await call("A", index, limit: nil) } }
                    try await group.waitForAll()
                }
            }
            try await eventually("A's calls wait at the broker", timeout: .seconds(20)) { try await queued() >= 1_000 }
            _ = try await sky.pause(service: service)
            let aWaiting = try await queued()
            let late = Task {
                try await withThrowingTaskGroup(of: Int.self) { group in
                    for index in 0..<50 { group.addTask { try await call("B", index, limit: nil) } }
                    try await group.waitForAll()
                }
            }
            try await eventually("B's calls wait behind A's", timeout: .seconds(20)) {
                try await queued() == aWaiting + 50
            }
            let resumedAt = log.position
            _ = try await sky.resume(service: service)
            try await late.value
            let entries = log.all
            let lastOfB = try #require(entries.lastIndex { $0.key == "B" && $0.event == .end })
            let aBetween = entries[resumedAt...lastOfB].count { $0.key == "A" && $0.event == .end }
            // One turn of A per call of B (50), and those of the 16 running at the pause that
            // ended after it; in arrival order B's would wait behind all of A's that waited.
            #expect(aBetween <= 50 + 16, "B's 50 calls ended within \(aBetween) of A's (\(aWaiting) of A's waited)")
            print("fairness of calls: B's 50 calls ended while \(aBetween) of A's did; \(aWaiting) of A's waited")
            try await backlog.value
        }

        @Test(.timeLimit(.minutes(3)))
        func aKeysHundredJobsBehindAnothersFifteenThousandAreNotHeldUp() async throws {
            try await Self.withCluster { sky, log in try await Self.jobsTakeTurns(sky, log) }
        }

        static func jobsTakeTurns(_ sky: SkyClient, _ log: RunLog) async throws {
            let backlog = try await Self.submit(sky, key: "A", count: 15_000, milliseconds: 1)
            let submitStarted = log.position
            let late = try await Self.submit(sky, key: "B", count: 100, milliseconds: 1)
            let submitted = log.position
            for id in late { _ = try await sky.result(of: id, as: Int.self) }
            // A's jobs that ended after B's submits (all of them on the broker's disk), up to
            // B's last end; and from B's first submit, which depends on how fast the submits
            // went.
            let entries = log.all
            let lastOfB = try #require(entries.lastIndex { $0.key == "B" && $0.event == .end })
            let aBetween = entries[submitted...lastOfB].count { $0.key == "A" && $0.event == .end }
            let aSinceFirst = entries[submitStarted...lastOfB].count { $0.key == "A" && $0.event == .end }
            let aLeft = backlog.count - entries.count { $0.key == "A" && $0.event == .end }
            #expect(aLeft > 0, "A still had a backlog when B's last job ended")
            // The bound docs/jobs.md gives: one turn of A per job of B (100), the pipeline ahead
            // of B's first (64 for 16 credits) and what was running (16).
            #expect(aBetween < 300, "B's 100 jobs ended within \(aBetween) of A's")
            print(
                "fairness: B's 100 jobs ended while \(aBetween) of A's did after B's submits (\(aSinceFirst) from the first); \(aLeft) of A's 15,000 still waited"
            )
        }
    }
}
