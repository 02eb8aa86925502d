import Foundation
import Sky
import SkyJSON
import SkyJournal
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Schedules on a real broker with a real SQLite journal, killed and restarted while a
    /// 1-second schedule runs.
    @Suite("Schedules on a real broker: each tick fires once across kills and restarts")
    struct ScheduleRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// A 1-second schedule (every missed tick caught up, overlapping runs allowed) for 30 s
        /// while the broker is `kill -9`ed, stopped with SIGTERM and `kill -9`ed again: afterwards the
        /// journal holds one job per tick from the first to the last, none twice, none missing.
        @Test(.timeLimit(.minutes(2)))
        func aOneSecondScheduleFiresEachTickOnceAcrossKillsAndARestart() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.echo"])
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.schedule(
                name: "beat", every: .seconds(1), task: EchoTask(message: "tick"), overlap: .allow,
                catchUp: .all(limit: 100))
            /// Waits until the schedule made `more` jobs beyond those seen so far.
            var seen = 0
            func waitForTicks(_ more: Int) async throws {
                let target = seen + more
                try await eventually("\(target) scheduled jobs", timeout: .seconds(20)) {
                    (try? await sky.jobs(service: EchoTask.service, limit: 1000).count) ?? 0 >= target
                }
                seen = try await sky.jobs(service: EchoTask.service, limit: 1000).count
            }
            // 30 s of ticks, the broker down three times on the way.
            try await waitForTicks(8)
            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await waitForTicks(8)
            cluster.broker.signal(SIGTERM)
            #expect(try await cluster.broker.waitForExit() == 0)
            try await cluster.restartBroker()
            try await waitForTicks(8)
            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await waitForTicks(6)
            let listed = try await sky.schedules()
            #expect(listed.map(\.spec.name) == ["beat"])
            #expect(listed.first?.lastJob != nil)
            await sky.close()
            await cluster.stop()

            let journal = try SQLiteJobStore(path: state.journal)
            let ticks = try journal.list(state: nil, service: EchoTask.service, limit: 1000).compactMap { job in
                job.idempotencyKey.flatMap { $0.split(separator: "/").last }.flatMap { Int64($0) }
            }.sorted()
            let first = try #require(ticks.first)
            let last = try #require(ticks.last)
            print("a 1 s schedule across two kills and a restart: \(ticks.count) ticks, \(first) to \(last)")
            #expect(Set(ticks).count == ticks.count, "no tick twice")
            #expect(ticks == Array(stride(from: first, through: last, by: 1000)), "no tick missing")
            #expect(ticks.count >= 30)
        }

        /// An operator's schedule from skyctl alone: added (queued overlap), listed, shown,
        /// paused (counted in the stats), triggered, resumed and removed; each tick's job is a
        /// `schedule.fired` event naming the schedule, the tick and the job, as skywatch shows it.
        @Test(.timeLimit(.minutes(2)))
        func skyctlOperatesASchedule() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.echo"])
            let watch = cluster.track(
                try SkyProcess("skywatch", ["--broker", cluster.clients, "--events", cluster.events, "--json"]))
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", ["schedules"] + arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            let added = try await skyctl([
                "add", "beat", "--every", "1", "--service", "sky.echo", "--body", #"{"message":"tick"}"#,
                "--overlap", "queue",
            ])
            #expect(added.status == 0 && added.out.first?.hasPrefix("beat  next tick 20") == true, "\(added)")
            let fired = try await watch.waitForLine { $0.contains(#""event":"schedule.fired""#) }
            let event = try CanonicalJSON.decode(SkyEvent.self, from: Array(fired.utf8))
            #expect(event.schedule?.name == "beat" && event.schedule?.tick != nil, "\(fired)")
            let job = try #require(event.task.flatMap { JobID($0.requestID) }, "\(fired)")
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.result(of: job, as: EchoTask.self) == EchoTask(message: "tick"))

            let listed = try await skyctl(["list"])
            #expect(listed.status == 0 && listed.out.count == 2, "\(listed)")
            #expect(listed.out.last?.hasPrefix("beat  every 1 s  active  20") == true, "\(listed)")
            let shown = try await skyctl(["show", "beat"])
            #expect(shown.out.contains("overlap:         queue"), "\(shown)")
            #expect(shown.out.contains { $0.hasPrefix("last job state:  ") }, "\(shown)")

            #expect(try await skyctl(["pause", "beat"]).out == ["beat  paused"])
            try await eventually("the stats count the paused schedule", timeout: .seconds(10)) {
                (try? await cluster.snapshot())?.jobs?.schedules?.paused == 1
            }
            let triggered = try await skyctl(["trigger", "beat"])
            let made = try #require(triggered.out.first.flatMap { JobID($0) }, "\(triggered)")
            let trigger = try await watch.waitForLine {
                $0.contains(#""event":"schedule.fired""#) && $0.contains(made.description)
            }
            #expect(!trigger.contains(#""tick""#), "a trigger's job has no tick: \(trigger)")
            let resumed = try await skyctl(["resume", "beat"])
            #expect(resumed.status == 0 && resumed.out.first?.hasPrefix("beat  next tick 20") == true, "\(resumed)")
            #expect(try await skyctl(["remove", "beat"]).out == ["beat  removed"])
            let gone = try await skyctl(["remove", "beat"])
            #expect(gone.status == 1 && gone.err.contains(#"no schedule named "beat""#), "\(gone)")
            #expect(gone.err.contains("skyctl schedules list names them") && !gone.err.contains("mmi."), "\(gone)")
            let bad = try await skyctl(["add", "x", "--cron", "0 0 30 2 *", "--service", "sky.echo"])
            #expect(bad.status == 64 && bad.err.contains("February has no day 30"), "\(bad)")
            // Mistakes in the flags exit 64, named as flags: a task that is not JSON (every
            // tick's job would fail at the worker), a catch-up of all without overlap allow, a
            // zone an interval does not use.
            for (arguments, said) in [
                (["--every", "60", "--body", "not json"], "--body is not JSON"),
                (["--every", "60", "--catch-up", "all"], "only --overlap allow lets run"),
                (["--every", "60", "--time-zone", "Europe/Berlin"], "--time-zone applies to --cron"),
            ] {
                let refused = try await skyctl(["add", "x", "--service", "sky.echo"] + arguments)
                #expect(refused.status == 64 && refused.err.contains(said), "\(arguments): \(refused)")
            }
            #expect(try await skyctl(["list"]).out == ["no schedules"])
            await sky.close()
            await cluster.stop()
        }
    }
}
