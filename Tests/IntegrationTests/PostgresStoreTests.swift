import Foundation
import Sky
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension SecondLineSuite {
    /// skybroker with `--store postgresql://…` on a real PostgreSQL server started by the test:
    /// the server crashing under a running broker, a second broker on the same store, what the
    /// broker logs. (Broker kills with jobs running: the jobs soak in JobTests, on both stores.)
    @Suite("Durable jobs on a PostgreSQL store")
    struct PostgresStoreTests {
        /// Jobs submitted and run while `outage` takes the store away and brings it (or another
        /// host) back: submits before it are all acknowledged; submits go on during it (those
        /// the broker cannot record are answered `journalUnavailable`, and it keeps serving);
        /// once it is over every submit is acknowledged again, and every acknowledged job ends
        /// with its own result, once. `outage` is given the broker's clients endpoint.
        static func submitAcross(
            _ outage: @escaping @Sendable (String) async throws -> Void, store: String, label: String
        ) async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--store", store])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w", capacity: 8, extraArguments: ["--workloads", "sky.sleep"])
            let sky = try await SkyClient(broker: cluster.clients)
            /// Submits 16 at a time: each task with the id it got, or nil if refused.
            func submit(_ range: Range<Int>) async throws -> [(SleepTask, JobID?)] {
                try await withThrowingTaskGroup(of: (SleepTask, JobID?).self) { group in
                    var outcomes: [(SleepTask, JobID?)] = []
                    for index in range {
                        let task = SleepTask(milliseconds: 2, tag: index)
                        group.addTask {
                            do {
                                return (task, try await sky.submit(task).id)
                            } catch SkyError.journalUnavailable {
                                return (task, nil)
                            }
                        }
                        if index - range.lowerBound >= 16, let outcome = try await group.next() {
                            outcomes.append(outcome)
                        }
                    }
                    for try await outcome in group { outcomes.append(outcome) }
                    return outcomes
                }
            }
            let before = try await submit(0..<200)
            #expect(before.allSatisfy { $0.1 != nil }, "every submit acknowledged before the outage")
            let over = Locked(false)
            let outageDone = Task {
                defer { over.withLock { $0 = true } }
                try await outage(cluster.clients)
            }
            var during: [(SleepTask, JobID?)] = []
            var next = 200
            repeat {
                during += try await submit(next..<next + 16)
                next += 16
            } while !over.withLock({ $0 })
            try await outageDone.value
            // The server is back; the broker's store comes back with its next write that gets
            // through (after a hung server, once the write in progress ended). From that
            // acknowledgement on, every submit is.
            try await eventually("a submit acknowledged once the server is back", timeout: .seconds(30)) {
                (try? await sky.submit(SleepTask(milliseconds: 1, tag: -3))) != nil
            }
            let after = try await submit(next..<next + 200)
            #expect(after.allSatisfy { $0.1 != nil }, "every submit acknowledged once the store is back")
            let acknowledged = (before + during + after).compactMap { task, id in id.map { (task, $0) } }
            for (task, id) in acknowledged {
                #expect(try await sky.result(of: id, as: SleepTask.self) == task)
            }
            print(
                "\(label): \(acknowledged.count) submits acknowledged, each ended with its result; of the \(during.count) made during the outage \(during.count { $0.1 == nil }) were refused"
            )
            #expect(Set(acknowledged.map(\.1)).count == acknowledged.count)
            #expect(cluster.broker.isRunning, "\(cluster.diagnostics)")
            await sky.close()
            await cluster.stop()
        }

        /// The server is killed (`kill -9`) and started again under a broker taking submits.
        @Test(.timeLimit(.minutes(2)))
        func aServerCrashUnderTheBrokerLosesNoAcknowledgedJob() async throws {
            let server = try await PostgresServer.start()
            try await Self.submitAcross(
                { _ in try await server.restart() }, store: server.uri(), label: "server restart")
            await server.stop()
        }

        /// Every process of the server stopped for 6 s under a broker alone (it hangs: the
        /// connections stay open and no TCP time-out fires): a submit fails with
        /// `journalUnavailable` within a second (its `confirmWithin`, not the 2 s a write waits
        /// for a silent server, nor when the server goes on), a scan meanwhile is answered, and
        /// once the server goes on the same broker records every submit again.
        @Test(.timeLimit(.minutes(2)))
        func aServerThatHangsUnderTheBrokerFailsSubmitsInSecondsAndLosesNoAcknowledgedJob() async throws {
            let server = try await PostgresServer.start()
            try await Self.submitAcross(
                { clients in
                    server.pause()
                    defer { server.resume() }
                    let paused = ContinuousClock.now
                    let sky = try await SkyClient(broker: clients)
                    #expect(
                        try await sky.scan(SleepTask(milliseconds: 1, tag: -1)) == SleepTask(milliseconds: 1, tag: -1))
                    let refused: Bool
                    let submitted = ContinuousClock.now
                    do {
                        _ = try await sky.submit(SleepTask(milliseconds: 1, tag: -2))
                        refused = false
                    } catch SkyError.journalUnavailable {
                        refused = true
                    }
                    let answered = submitted.duration(to: .now)
                    print(
                        "a hung server: a submit made \(paused.duration(to: submitted)) after it stopped failed after \(answered)"
                    )
                    #expect(refused, "a submit was acknowledged while the server hung")
                    // Within a second on an idle machine (850 ms, and the broker's tick); the
                    // bound leaves room for a loaded one, and is under the 2 s of the store's own.
                    #expect(answered < .milliseconds(1800), "a submit waited \(answered) on a hung server")
                    await sky.close()
                    try await Task.sleep(until: paused + .seconds(6))  // the scenario: it hangs this long
                }, store: server.uri(), label: "server hung")
            await server.stop()
        }

        /// PostgreSQL's own failover: a primary with a synchronous streaming standby, the primary
        /// killed (`kill -9`) and the standby promoted (`pg_ctl promote`). The broker's URI names
        /// both hosts with `target_session_attrs=read-write`: its next connection reaches the
        /// new primary, and no job acknowledged on the old one is lost.
        @Test(.timeLimit(.minutes(2)))
        func aPromotedSynchronousStandbyTakesOverAndNoAcknowledgedJobIsLost() async throws {
            let primary = try await PostgresServer.start(name: "primary")
            let standby = try await primary.startStandby()
            try await primary.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            try await primary.execute("SELECT pg_reload_conf()")
            let store =
                "postgresql://sky@127.0.0.1:\(primary.port),127.0.0.1:\(standby.port)/postgres?target_session_attrs=read-write&connect_timeout=2"
            try await Self.submitAcross(
                { _ in
                    await primary.kill()
                    try await standby.promote()
                }, store: store, label: "failover to the standby")
            await primary.stop()
            await standby.stop()
        }

        /// One active broker per store also across a lost session: the server restarts, so the
        /// first broker's lock goes with its session. A second broker that takes the store
        /// meanwhile keeps it, and the first stops at its next use of the store, naming why. A broker
        /// paused while another took the store and left it finds the epoch moved on when it
        /// wakes, and stops too: what it holds of the jobs may be stale.
        @Test(.timeLimit(.minutes(2)))
        func aBrokerThatLostTheStoreToAnotherStops() async throws {
            let server = try await PostgresServer.start()
            let first = try await StartedBroker.start(arguments: ["--store", server.uri()])
            defer { first.process.killNow() }
            // Paused, so that the second broker is first to the store once it is back.
            first.process.signal(SIGSTOP)
            try await server.restart()
            let second = try await StartedBroker.start(arguments: ["--store", server.uri()])
            defer { second.process.killNow() }
            first.process.signal(SIGCONT)
            #expect(try await first.process.waitForExit() == 1)
            #expect(
                first.process.errorText.contains("another skybroker took the job store \(server.uri())"),
                "\(first.process.errorText)")
            // The second broker serves on. Then it is paused (SIGSTOP) and loses its session
            // meanwhile; a third broker takes the store and leaves it before the second wakes.
            let sky = try await SkyClient(broker: second.clients)
            _ = try await sky.submit(SleepTask(milliseconds: 1, tag: 1))
            await sky.close()
            second.process.signal(SIGSTOP)
            try await server.restart()
            let third = try await StartedBroker.start(arguments: ["--store", server.uri()])
            third.process.signal(SIGKILL)
            _ = try await third.process.waitForExit()
            second.process.signal(SIGCONT)
            #expect(try await second.process.waitForExit() == 1)
            #expect(
                second.process.errorText.contains("another skybroker took the job store \(server.uri())"),
                "\(second.process.errorText)")
            await server.stop()
        }

        /// One active broker per store: a second one waits as a standby, naming the store
        /// (without the URI's password) and the active broker; it takes over as soon as the
        /// first stops. A standby told to stop while it waits (SIGTERM) leaves the store's list
        /// of standbys and exits 0, naming why.
        @Test(.timeLimit(.minutes(1)))
        func aSecondBrokerOnTheSameStoreWaitsAsAStandbyAndTakesOverWhenTheFirstStops() async throws {
            let server = try await PostgresServer.start()
            let uri = "postgresql://sky:not-needed@127.0.0.1:\(server.port)/postgres"
            let cluster = try await TestCluster.start(extraArguments: ["--store", uri])
            defer { cluster.killAll() }
            try await cluster.broker.waitForLine(onStandardError: true) {
                $0.contains("journal open")
                    && $0.contains(
                        "jobs=0 store=postgresql://sky:***@127.0.0.1:\(server.port)/postgres unfinished jobs=0")
            }
            // A standby on ports the kernel picks could not be found once it took over: refused.
            let unfindable = try SkyProcess(
                "skybroker",
                [
                    "--store", uri, "--clients", "tcp://127.0.0.1:*", "--workers", "tcp://127.0.0.1:*", "--events",
                    "tcp://127.0.0.1:*",
                ])
            defer { unfindable.killNow() }
            #expect(try await unfindable.waitForExit() == 1)
            #expect(
                unfindable.errorText.contains("would wait as a standby, but it binds tcp://127.0.0.1:*"),
                "\(unfindable.errorText)")
            /// A broker on the store on fixed ports of its own: it can wait as a standby.
            func standby() throws -> SkyProcess {
                let endpoints = try ["--clients", "--workers", "--events"].flatMap { flag in
                    [flag, "tcp://127.0.0.1:\(try freeLoopbackPort())"]
                }
                return try SkyProcess("skybroker", ["--store", uri] + endpoints)
            }
            let second = try standby()
            defer { second.killNow() }
            let waiting = try await second.waitForLine(onStandardError: true) {
                $0.contains("standby: another broker is active on the job store")
            }
            #expect(waiting.contains("pid \(cluster.broker.pid) clients \(cluster.clients)"), "\(waiting)")
            #expect(waiting.contains("store=postgresql://sky:***@"), "\(waiting)")
            #expect(!second.outputLines.contains { $0.hasPrefix("skybroker ready") }, "a standby binds nothing")
            let leaving = try standby()
            defer { leaving.killNow() }
            try await leaving.waitForLine(onStandardError: true) { $0.contains("standby: another broker is active") }
            let itsRow = "SELECT count(*) FROM sky_standbys WHERE name LIKE '% pid \(leaving.pid) %'"
            #expect(try await server.query(itsRow) == ["1"], "a waiting standby says so in sky_standbys")
            let told = ContinuousClock.now
            leaving.signal(SIGTERM)
            #expect(try await leaving.waitForExit(timeout: .seconds(5)) == 0, "\(leaving.errorText)")
            print("a waiting standby told to stop exited after \(told.duration(to: .now))")
            #expect(leaving.errorText.contains("stopped while waiting as a standby"), "\(leaving.errorText)")
            #expect(try await server.query(itsRow) == ["0"], "it left sky_standbys")
            cluster.broker.signal(SIGTERM)
            try await second.waitForLine { $0.hasPrefix("skybroker ready ") }
            #expect(!second.errorText.contains("not-needed") && !cluster.broker.errorText.contains("not-needed"))
            await cluster.stop()
            await server.stop()
        }
    }
}
