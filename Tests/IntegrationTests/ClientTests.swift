import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    @Suite("SkyClient on a real cluster: cancellation within 50 ms, broker restarts, broken connections")
    struct ClientTests {
        @Test func cancellingACallStopsItOnTheWorkerWithin50ms() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "single", capacity: 1)
            let sky = try await SkyClient(broker: cluster.clients)
            let call = Task { try await sky.scan(SleepTask(milliseconds: 60_000, tag: 1)) }
            try await eventually("the task runs on the worker") { try await sky.clusterSnapshot().inFlight == 1 }
            let cancelledAt = ContinuousClock.now
            call.cancel()
            await #expect(throws: CancellationError.self) { _ = try await call.value }
            let latency = ContinuousClock.now - cancelledAt
            #expect(latency < .milliseconds(50), "CancellationError after \(latency)")
            #expect(await sky.statistics.suspendedCallers == 0)
            // The worker's only slot is free again: its handler was cancelled, not left sleeping.
            let next = try await value(
                of: Task { try await sky.scan(SleepTask(milliseconds: 10, tag: 2)) }, within: .seconds(10),
                "a task on the freed slot")
            #expect(next.tag == 2)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.cancelled == 1 && snapshot.inFlight == 0)
            print("cancellation: CancellationError after \(latency)")
            #expect(await sky.statistics.connected)
            await sky.close()
            #expect(await !sky.statistics.connected, "closed: no connection")
            await cluster.stop()
        }

        @Test func aThousandScansInFlightSurviveTheBrokerBeingKilledAndRestarted() async throws {
            let cluster = try await TestCluster.start(extraArguments: TestCluster.fastHeartbeats)
            defer { cluster.killAll() }
            for name in ["r-1", "r-2"] { _ = try await cluster.startWorker(name: name, capacity: 8) }
            let sky = try await SkyClient(broker: cluster.clients)
            let tasks = (0..<1000).map { SleepTask(milliseconds: 20, tag: $0) }
            var seen = Set<Int>()
            var failures: [String] = []
            var restart: Task<Void, any Error>?
            let started = ContinuousClock.now
            for await done in sky.scanAll(tasks, concurrency: 1000) {
                #expect(seen.insert(done.index).inserted, "task \(done.index) returned twice")
                switch done.result {
                case .success(let result): #expect(result == done.task)
                case .failure(let error): failures.append("\(done.index): \(error)")
                }
                if done.progress.finished == 50 {
                    cluster.broker.signal(SIGKILL)
                    print("broker killed with \(1000 - 50) scans in flight")
                    restart = Task {
                        try await Task.sleep(for: .seconds(3))  // the scenario: down for 3 s
                        try await cluster.restartBroker()
                    }
                }
            }
            try await restart?.value
            let elapsed = ContinuousClock.now - started
            #expect(failures.isEmpty, "\(failures.prefix(5))\n\(cluster.diagnostics)")
            #expect(seen.count == 1000)
            let statistics = await sky.statistics
            #expect(statistics.suspendedCallers == 0 && statistics.callsInFlight == 0)
            // docs/client.md: what was in flight is sent again on the new connection; no retry
            // (and no attempt timeout) is needed, and no reply arrives twice.
            #expect(statistics.resentAfterReconnect > 0)
            #expect(statistics.retries == 0 && statistics.attemptTimeouts == 0)
            #expect(statistics.unmatchedReplies == 0)
            print(
                "broker restart: 1000/1000 in \(elapsed); resent \(statistics.resentAfterReconnect),"
                    + " retries \(statistics.retries), unmatched replies \(statistics.unmatchedReplies)")
            await sky.close()
            await cluster.stop()
        }

        /// `ss -K` (socket destroy) needs root and a kernel with INET_DIAG_DESTROY.
        static let canBreakConnections =
            getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/ss")

        @Test(
            "A broken connection (broker still running) costs the calls in flight no timeout",
            .enabled(if: canBreakConnections, "needs root for ss -K"))
        func aBrokenConnectionIsRepairedWithoutWaitingForTimeouts() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "steady", capacity: 20)
            let sky = try await SkyClient(broker: cluster.clients)
            let calls = Task {
                try await sky.scanConcurrently((0..<20).map { SleepTask(milliseconds: 1500, tag: $0) })
            }
            try await eventually("20 tasks running") { try await sky.clusterSnapshot().inFlight == 20 }
            let port = String(cluster.clients.split(separator: ":").last!)
            let brokenAt = ContinuousClock.now
            let killer = Process()
            killer.executableURL = URL(fileURLWithPath: "/usr/bin/ss")
            killer.arguments = ["-K", "dst", "127.0.0.1", "dport", "=", port]
            killer.standardOutput = FileHandle.nullDevice
            killer.standardError = FileHandle.nullDevice
            try killer.run()
            killer.waitUntilExit()
            let results = try await value(of: calls, within: .seconds(20), "20 sleeps after the connection broke")
            let elapsed = ContinuousClock.now - brokenAt
            #expect(results.map(\.tag).sorted() == Array(0..<20))
            let statistics = await sky.statistics
            #expect(statistics.resentAfterReconnect == 20, "\(statistics)")
            #expect(statistics.attemptTimeouts == 0 && statistics.retries == 0)
            #expect(elapsed < .seconds(5), "done \(elapsed) after the break; an attempt timeout is 30 s")
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.requestsAccepted == 20, "each ran once; the resends joined them")
            print(
                "connection broken: 20/20 done \(elapsed) later, \(snapshot.counters.duplicateRequests) resends joined")
            await sky.close()
            await cluster.stop()
        }
    }
}
