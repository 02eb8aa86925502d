import SkyProtocol
import SkyTestSupport
import SkyZMQ
import Testing

@testable import SkyWorkerKit

@Suite("Worker runtime: the hand-off of started tasks to runners and the task group")
struct RunnerInboxTests {
    static func job(_ n: UInt64) -> SkyWorker.TaskRun {
        SkyWorker.TaskRun(
            key: WorkerStateMachine.TaskKey(tag: [UInt8(truncatingIfNeeded: n)], requestID: RequestID(high: 0, low: n)),
            ticket: TaskHandles.Ticket(slot: Int(n), use: 1),
            request: TaskRequest(
                requestID: RequestID(high: 0, low: n), service: "echo", body: [UInt8(truncatingIfNeeded: n)]),
            connection: 1)
    }

    static func number(_ job: SkyWorker.TaskRun?) -> UInt64? { job?.request.requestID.low }

    /// Offers `jobs` as the I/O thread does in one wake-up.
    static func batch(_ jobs: [SkyWorker.TaskRun], to inbox: RunnerInbox) {
        for job in jobs { inbox.offer(job) }
        inbox.flush()
    }

    /// The tasks `runners` new runners take, one each.
    static func taken(by runners: Int, from inbox: RunnerInbox) async -> [UInt64?] {
        var taken: [UInt64?] = []
        for _ in 0..<runners { taken.append(number(await inbox.nextForRunner(first: true))) }
        return taken
    }

    /// Only a queued task needs the group's loop: the I/O thread takes the inbox's lock to ask
    /// it (``RunnerInbox/flush()``) only after an offer that queued one.
    @Test(.timeLimit(.minutes(1)))
    func anOfferSaysWhetherItQueuedTheTask() async throws {
        let inbox = RunnerInbox()
        #expect(inbox.offer(Self.job(1)), "no runner waits: queued")
        #expect(Self.number(await inbox.nextForRunner()) == 1)
        let waiting = Task { Self.number(await inbox.nextForRunner()) }
        try await eventually("a runner waits") { inbox.idleRunners == 1 }
        #expect(!inbox.offer(Self.job(2)), "handed to the waiting runner, nothing queued")
        #expect(await waiting.value == 2)
        inbox.finish()
        #expect(!inbox.offer(Self.job(3)), "dropped after the finish, nothing queued")
    }

    @Test func theGroupIsAskedOnceForARunnerPerQueuedTaskAndTheyTakeThemInOrder() async {
        let inbox = RunnerInbox()
        Self.batch([Self.job(1), Self.job(2)], to: inbox)
        Self.batch([Self.job(3)], to: inbox)
        #expect(await inbox.next() == 3)
        #expect(await Self.taken(by: 3, from: inbox) == [1, 2, 3])
    }

    /// Runners asked for and not started yet cover their tasks: the group is not asked twice.
    @Test(.timeLimit(.minutes(1)))
    func tasksWithRunnersOnTheirWayAreNotAskedForAgain() async throws {
        let inbox = RunnerInbox()
        Self.batch([Self.job(1)], to: inbox)
        #expect(await inbox.next() == 1)
        let group = Task { await inbox.next() }
        try await eventually("the group waits") { inbox.consumerWaits }
        Self.batch([Self.job(2)], to: inbox)
        #expect(await group.value == 1, "only the new task needs a runner")
        #expect(await Self.taken(by: 2, from: inbox) == [1, 2])
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitingGroupIsAskedByTheNextBatch() async throws {
        let inbox = RunnerInbox()
        let group = Task { await inbox.next() }
        try await eventually("the group waits") { inbox.consumerWaits }
        Self.batch([Self.job(7)], to: inbox)
        #expect(await group.value == 1)
        #expect(!inbox.consumerWaits)
        #expect(await Self.taken(by: 1, from: inbox) == [7])
    }

    @Test func finishEndsTheGroupOnlyAfterItWasAskedForWhatWasQueued() async {
        let inbox = RunnerInbox()
        Self.batch([Self.job(1)], to: inbox)
        inbox.finish()
        Self.batch([Self.job(2)], to: inbox)
        #expect(await inbox.next() == 1)
        #expect(await inbox.next() == nil)
        #expect(await inbox.next() == nil)
        #expect(await Self.taken(by: 2, from: inbox) == [1, nil], "the task queued before the finish runs")
    }

    @Test(.timeLimit(.minutes(1)))
    func finishEndsAWaitingGroup() async throws {
        let inbox = RunnerInbox()
        let group = Task { await inbox.next() }
        try await eventually("the group waits") { inbox.consumerWaits }
        inbox.finish()
        #expect(await group.value == nil)
    }

    /// Many producers against the group and its runners: every task is taken exactly once.
    @Test(.timeLimit(.minutes(1)))
    func everyTaskFromManyThreadsIsTakenOnce() async {
        let inbox = RunnerInbox()
        let producers = 8
        let each: UInt64 = 500
        let total = producers * Int(each)
        let taken = Locked<[UInt64]>([])
        // The group, as the worker's: a runner for each task it is asked for, taking task after task.
        let group = Task {
            await withDiscardingTaskGroup { group in
                while let runners = await inbox.next() {
                    for _ in 0..<runners {
                        group.addTask {
                            var first = true
                            while let job = await inbox.nextForRunner(first: first) {
                                first = false
                                taken.withLock { $0.append(job.request.requestID.low) }
                            }
                        }
                    }
                }
            }
        }
        await withTaskGroup(of: Void.self) { producersGroup in
            for producer in 0..<UInt64(producers) {
                producersGroup.addTask {
                    for n in 0..<each { Self.batch([Self.job(producer * each + n)], to: inbox) }
                }
            }
        }
        // Finishing takes nothing away: every task queued before it is still taken.
        inbox.finish()
        await group.value
        #expect(taken.withLock { $0 }.sorted() == Array(0..<UInt64(total)))
    }

    /// A task offered while a runner waits goes to that runner: the group is not asked.
    @Test(.timeLimit(.minutes(1)))
    func aWaitingRunnerTakesTheNextTaskAndTheGroupIsNotAsked() async throws {
        let inbox = RunnerInbox()
        let group = Task { await inbox.next() }
        let runner = Task { await inbox.nextForRunner() }
        try await eventually("both wait") { inbox.consumerWaits && inbox.idleRunners == 1 }
        Self.batch([Self.job(5)], to: inbox)
        #expect(Self.number(await runner.value) == 5)
        #expect(inbox.consumerWaits && inbox.idleRunners == 0)
        // The next one finds no runner waiting: the group is asked for one.
        Self.batch([Self.job(6)], to: inbox)
        #expect(await group.value == 1)
    }

    /// Runners beyond the limit end instead of waiting, so that a burst's runners do not keep
    /// their memory; finishing ends those that wait.
    @Test(.timeLimit(.minutes(1)))
    func runnersBeyondTheIdleLimitEndAndFinishEndsTheWaitingOnes() async throws {
        let inbox = RunnerInbox(idleLimit: 1)
        let waiting = Task { await inbox.nextForRunner() }
        try await eventually("a runner waits") { inbox.idleRunners == 1 }
        #expect(await inbox.nextForRunner() == nil, "a second runner would exceed the limit")
        inbox.finish()
        #expect(await waiting.value == nil)
        #expect(await inbox.nextForRunner() == nil, "finished")
    }
}
