import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Calls that outlive their caller (`ScanOptions(keepIfAbandoned:)`) on a real broker with a
    /// real SQLite journal and a real worker: the caller's deadline passes, or its client goes
    /// away, and another client reads the result.
    @Suite("Calls kept as jobs when their caller leaves")
    struct KeptCallRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        @Test(.timeLimit(.minutes(1)))
        func aCallWhoseDeadlinePassesIsKeptAndAnotherClientReadsItsResult() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.sleep"])
            let caller = try await SkyClient(broker: cluster.clients)
            let started = ContinuousClock.now
            var kept: JobID?
            do {
                // Ten times the deadline: a loaded machine's CI answered the caller 1.7 s after
                // its call (a result of 1.5 s could not be told from the deadline then).
                _ = try await caller.scan(
                    SleepTask(milliseconds: 4000, tag: 41),
                    options: ScanOptions(deadline: .milliseconds(400), keepIfAbandoned: true))
                Issue.record("the call returned before its deadline")
            } catch SkyError.keptAsJob(let id) {
                kept = id
            }
            let waited = ContinuousClock.now - started
            #expect(waited < .milliseconds(3000), "the caller is answered at its deadline, not at the result")
            // An id chosen first is the one the caller hears.
            let chosen = JobID.random()
            await #expect(throws: SkyError.keptAsJob(chosen)) {
                try await caller.scan(
                    SleepTask(milliseconds: 1500, tag: 40), keptAs: chosen,
                    options: ScanOptions(deadline: .milliseconds(400)))
            }
            await caller.close()

            let id = try #require(kept)
            let reader = try await SkyClient(broker: cluster.clients)
            let result = try await reader.result(of: id, as: SleepTask.self)
            #expect(result.tag == 41)
            // Run once: the call's delivery was the job's only attempt.
            #expect(try await reader.status(of: id) == .succeeded(attempt: 1))
            #expect(try await reader.result(of: chosen, as: SleepTask.self).tag == 40)
            await reader.close()
            await cluster.stop()
        }

        @Test(.timeLimit(.minutes(1)))
        func aCallWhoseClientGoesAwayIsKeptWithItsResult() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.sleep"])
            let caller = try await SkyClient(broker: cluster.clients)
            let call = Task {
                try await caller.scan(
                    SleepTask(milliseconds: 1500, tag: 42),
                    options: ScanOptions(deadline: .seconds(20), keepIfAbandoned: true))
            }
            try await eventually("the call runs at the worker", timeout: .seconds(10)) {
                try await cluster.snapshot().inFlight == 1
            }
            // The client goes away while the worker runs the call, long before its deadline.
            await caller.close()
            await #expect(throws: SkyError.clientClosed) { _ = try await call.value }

            let reader = try await SkyClient(broker: cluster.clients)
            var kept: [(id: JobID, service: String, status: JobStatus)] = []
            try await eventually("the call is kept as a job", timeout: .seconds(10)) {
                kept = try await reader.jobs(service: SleepTask.service)
                return !kept.isEmpty
            }
            // Kept when its client closed (the close's CANCEL asks the broker to keep it), while
            // the worker still runs it: its result comes once the run ends, from that one run.
            let found = try #require(kept.first)
            #expect(kept.count == 1)
            #expect(try await reader.result(of: found.id, as: SleepTask.self).tag == 42)
            #expect(try await reader.status(of: found.id) == .succeeded(attempt: 1))
            await reader.close()
            await cluster.stop()
        }

        /// The caller holds the job's id before the call goes out (`skyctl call --keep` prints it),
        /// and is killed while the worker runs the call: another process reads the result by it.
        @Test(.timeLimit(.minutes(1)))
        func aKilledCallersCallIsReadByTheIDItChoseFirst() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.sleep"])
            let caller = cluster.track(
                try SkyProcess(
                    "skyctl",
                    [
                        "call", SleepTask.service, "--json", #"{"milliseconds":1500,"tag":43}"#, "--timeout", "20",
                        "--keep", "--broker", cluster.clients,
                    ]))
            let said = try await caller.waitForLine(onStandardError: true) { $0.contains("kept as job") }
            let id = try #require(said.split(separator: " ").last.flatMap { JobID(String($0)) }, "\(said)")
            try await eventually("the call runs at the worker", timeout: .seconds(10)) {
                try await cluster.snapshot().inFlight == 1
            }
            // Asked about while the call runs: where it stands, not "unknown"; a wait is held.
            let reader = try await SkyClient(broker: cluster.clients)
            #expect(try await reader.status(of: id) == .running(attempt: 1, worker: "w1"))
            let waiting = Task { try await reader.result(of: id, as: SleepTask.self) }
            caller.signal(SIGKILL)
            _ = try await caller.waitForExit()

            #expect(try await waiting.value.tag == 43)
            #expect(try await reader.status(of: id) == .succeeded(attempt: 1), "run once: the call was its attempt")
            #expect(try await reader.jobs(service: SleepTask.service).map(\.id) == [id])
            await reader.close()
            await cluster.stop()
        }

        @Test(.timeLimit(.minutes(1)))
        func aBrokerThatKeepsNoJournalRefusesAKeptCallBeforeItRuns() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--state-dir", "none"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", extraArguments: ["--workloads", "sky.sleep"])
            let caller = try await SkyClient(broker: cluster.clients)
            await #expect {
                _ = try await caller.scan(
                    SleepTask(milliseconds: 10), options: ScanOptions(keepIfAbandoned: true))
            } throws: { error in
                guard case SkyError.invalidTask(let message) = error else { return false }
                return message.contains("keepIfAbandoned")
            }
            await caller.close()
            await cluster.stop()
        }
    }
}
