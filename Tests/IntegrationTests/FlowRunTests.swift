import Foundation
import Sky
import SkyJournal
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Flows on a real broker with a real SQLite journal and a real worker: the typed API, and
    /// the broker `kill -9`ed while each kind of flow runs.
    @Suite("Flows on a real broker: chains, groups and chords across kill -9")
    struct FlowRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// Runs `flow` on a fresh cluster; kills the broker (`kill -9`) once `killWhen` holds
        /// of the flow's steps, starts it again, and checks the result and that every step that
        /// had ended before the kill ran once.
        static func run<Output: Equatable>(
            _ flow: Flow<Output>, capacity: Int, expected: Output,
            killWhen: @escaping @Sendable ([FlowStatus.Step]) -> Bool
        ) async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(
                name: "w1", capacity: capacity, extraArguments: ["--workloads", "sky.sleep,sky.gather"])
            let sky = try await SkyClient(broker: cluster.clients)
            let job = try await sky.submit(flow)
            try await eventually("the flow half done", timeout: .seconds(30)) {
                killWhen(try await job.steps().steps)
            }
            cluster.broker.killNow()
            // What had ended on disk (a step's end the broker knew of but had not committed
            // runs again, as any job's).
            var endedBeforeKill: Set<Int> = []
            do {
                // The killed broker's lock on the file goes with its process, which the kernel
                // may still be tearing down.
                var opened: SQLiteJobStore?
                try await eventually("the killed broker's journal free", timeout: .seconds(10)) {
                    opened = try? SQLiteJobStore(path: state.journal)
                    return opened != nil
                }
                let journal = try #require(opened)
                let keys = (0..<FlowSpec.maxSteps).prefix(200).map { FlowSpec.stepKey(flow: job.id, step: $0) }
                for record in try journal.jobs(idempotencyKeys: keys) where record.state.isFinished {
                    if let step = record.idempotencyKey.flatMap(FlowSpec.step(ofKey:))?.step {
                        endedBeforeKill.insert(step)
                    }
                }
            }
            #expect(!endedBeforeKill.isEmpty)
            try await cluster.restartBroker()
            #expect(try await job.value == expected)
            let steps = try await job.steps()
            #expect(steps.state == .succeeded)
            for step in steps.steps {
                #expect(step.state == .succeeded)
                if endedBeforeKill.contains(step.index) {
                    #expect(
                        step.attempt == 1, "step \(step.index) ended before the kill, and ran \(step.attempt) times")
                }
            }
            await sky.close()
            await cluster.stop()
        }

        @Test(.timeLimit(.minutes(1)))
        func aChainOfThreeResumesAfterAKillWithoutRunningAnEndedStepAgain() async throws {
            let flow = try Flow(SleepTask(milliseconds: 400, tag: 7)).then(SleepTask.self).then(SleepTask.self)
            try await Self.run(flow, capacity: 2, expected: SleepTask(milliseconds: 400, tag: 7)) { steps in
                steps[0].state == .succeeded && steps[1].state == .running
            }
        }

        /// A chain whose broker is killed while its second step runs: the first had ended on
        /// disk (a step is submitted only once the one before it ended there), so it never runs
        /// again, on whichever store.
        static func aChainRunsItsEndedStepOnceAcrossAKill(on store: IntegrationSuite.JobTests.Store) async throws {
            let state = try await IntegrationSuite.JobTests.JobStoreFixture(store)
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", capacity: 2, extraArguments: ["--workloads", "sky.sleep"])
            let sky = try await SkyClient(broker: cluster.clients)
            let job = try await sky.submit(
                try Flow(SleepTask(milliseconds: 300, tag: 3)).then(SleepTask.self).then(SleepTask.self))
            try await eventually("the second step running", timeout: .seconds(30)) {
                try await job.steps().steps[1].state == .running
            }
            cluster.broker.killNow()
            try await cluster.restartBroker()
            #expect(try await job.value == SleepTask(milliseconds: 300, tag: 3))
            let steps = try await job.steps().steps
            #expect(steps.map(\.state) == [.succeeded, .succeeded, .succeeded])
            #expect(steps[0].attempt == 1 && steps[2].attempt == 1, "\(steps)")
            await sky.close()
            await cluster.stop()
        }

        @Test(.timeLimit(.minutes(1)))
        func aGroupOfAHundredResumesAfterAKill() async throws {
            let tasks = (0..<100).map { SleepTask(milliseconds: 50, tag: $0) }
            let flow = try Flow(group: tasks)
            try await Self.run(flow, capacity: 8, expected: tasks) { steps in
                steps.count { $0.state == .succeeded } >= 30
            }
        }

        @Test(.timeLimit(.minutes(1)))
        func aChordOfFiftyAndItsCallbackResumeAfterAKill() async throws {
            let tasks = (0..<50).map { SleepTask(milliseconds: 50, tag: $0) }
            let flow = try Flow(group: tasks).then(GatherTask.self)
            try await Self.run(flow, capacity: 8, expected: GatherTask.Result(count: 50, tags: Array(0..<50))) {
                steps in steps.count { $0.state == .succeeded } >= 20
            }
        }

        /// A step whose worker reads another type than the step before returns (a worker of
        /// another version): the step fails as any task that cannot be decoded, and the flow
        /// fails naming it; nothing after it runs.
        @Test(.timeLimit(.minutes(1)))
        func aStepOfTheWrongTypeAtRunTimeFailsTheFlowNamingIt() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(
                name: "w1", capacity: 2, extraArguments: ["--workloads", "sky.sleep,sky.gather"])
            let sky = try await SkyClient(broker: cluster.clients)
            let first = try JSONTaskCoder().encode(SleepTask(milliseconds: 1, tag: 1))
            let spec = FlowSpec(
                .chain([
                    .step(JobSubmission(service: SleepTask.service, body: first)),
                    .step(JobSubmission(service: GatherTask.service, body: [])),
                    .step(JobSubmission(service: SleepTask.service, body: [])),
                ]))
            let id = try await sky.submitFlow(spec)
            await #expect {
                _ = try await sky.flow(id, as: SleepTask.self).value
            } throws: { error in
                "\(error)".contains("step 1 (sky.gather") && "\(error)".contains("decod")
            }
            #expect(try await sky.flowStatus(id).steps.map(\.state) == [.succeeded, .failed, .cancelled])
            // The shell's view: the tree, a line a node.
            let shown = try SkyProcess("skyctl", ["flows", "show", "\(id)", "--broker", cluster.clients])
            #expect(try await shown.waitForExit() == 0)
            #expect(shown.outputLines.first?.hasPrefix("flow \(id)  failed  (on failure: stop)") == true)
            #expect(shown.outputLines.dropFirst().first == "chain")
            #expect(
                shown.outputLines.count == 5
                    && shown.outputLines[2].hasPrefix("├─ step 0  sky.sleep  succeeded (attempt 1)  job "))
            #expect(shown.outputLines[4] == "└─ step 2  sky.sleep  cancelled", "\(shown.outputLines)")
            let unknown = try SkyProcess(
                "skyctl",
                ["flows", "show", "\(JobID(bytes: [UInt8](repeating: 1, count: 16))!)", "--broker", cluster.clients])
            #expect(try await unknown.waitForExit() == 1)
            #expect(unknown.errorText.contains("no flow"), "\(unknown.errorText)")
            await sky.close()
            await cluster.stop()
        }
    }
}
