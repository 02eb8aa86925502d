import SkyProtocol
import SkyTestSupport
import Testing

@testable import SkyWorkerKit

@Suite("Worker runtime: the hand-off of started tasks to runners and the task group")
struct JobInboxTests {
    static func job(_ n: UInt64) -> SkyWorker.Job {
        SkyWorker.Job(
            key: WorkerStateMachine.TaskKey(tag: [UInt8(truncatingIfNeeded: n)], requestID: RequestID(high: 0, low: n)),
            ticket: TaskHandles.Ticket(slot: Int(n), use: 1),
            request: TaskRequest(
                requestID: RequestID(high: 0, low: n), service: "echo", body: [UInt8(truncatingIfNeeded: n)]))
    }

    static func numbers(_ jobs: [SkyWorker.Job]?) -> [UInt64]? { jobs?.map(\.request.requestID.low) }

    /// Offers `jobs` as the I/O thread does in one wake-up.
    static func batch(_ jobs: [SkyWorker.Job], to inbox: JobInbox) {
        for job in jobs { inbox.offer(job) }
        inbox.flush()
    }

    @Test func whatWasQueuedBeforeTheConsumerAskedComesInOneBatchInOrder() async {
        let inbox = JobInbox()
        Self.batch([Self.job(1), Self.job(2)], to: inbox)
        Self.batch([Self.job(3)], to: inbox)
        #expect(Self.numbers(await inbox.next()) == [1, 2, 3])
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitingConsumerIsResumedByTheNextBatch() async throws {
        let inbox = JobInbox()
        let consumer = Task { await inbox.next() }
        try await eventually("the consumer waits") { inbox.consumerWaits }
        Self.batch([Self.job(7)], to: inbox)
        #expect(Self.numbers(await consumer.value) == [7])
        #expect(!inbox.consumerWaits)
    }

    @Test func finishEndsTheConsumerOnlyAfterItTookWhatWasQueued() async {
        let inbox = JobInbox()
        Self.batch([Self.job(1)], to: inbox)
        inbox.finish()
        Self.batch([Self.job(2)], to: inbox)
        #expect(Self.numbers(await inbox.next()) == [1])
        #expect(await inbox.next() == nil)
        #expect(await inbox.next() == nil)
    }

    @Test(.timeLimit(.minutes(1)))
    func finishEndsAWaitingConsumer() async throws {
        let inbox = JobInbox()
        let consumer = Task { await inbox.next() }
        try await eventually("the consumer waits") { inbox.consumerWaits }
        inbox.finish()
        #expect(await consumer.value == nil)
    }

    /// Many producers against one consumer: every job arrives exactly once.
    @Test(.timeLimit(.minutes(1)))
    func everyJobFromManyThreadsArrivesOnce() async {
        let inbox = JobInbox()
        let producers = 8
        let each: UInt64 = 500
        let consumer = Task {
            var seen: [UInt64] = []
            while seen.count < producers * Int(each), let batch = await inbox.next() {
                seen += batch.map(\.request.requestID.low)
            }
            return seen
        }
        await withTaskGroup(of: Void.self) { group in
            for producer in 0..<UInt64(producers) {
                group.addTask {
                    for n in 0..<each { Self.batch([Self.job(producer * each + n)], to: inbox) }
                }
            }
        }
        #expect(await consumer.value.sorted() == Array(0..<UInt64(producers) * each))
    }

    /// A task offered while a runner waits goes to that runner, not to the group: no new child.
    @Test(.timeLimit(.minutes(1)))
    func aWaitingRunnerTakesTheNextTaskAndTheGroupIsNotWoken() async throws {
        let inbox = JobInbox()
        let group = Task { await inbox.next() }
        let runner = Task { await inbox.nextForRunner() }
        try await eventually("both wait") { inbox.consumerWaits && inbox.idleRunners == 1 }
        Self.batch([Self.job(5)], to: inbox)
        #expect(await runner.value?.request.requestID.low == 5)
        #expect(inbox.consumerWaits && inbox.idleRunners == 0)
        // The next one finds no runner waiting: it goes to the group, which starts one.
        Self.batch([Self.job(6)], to: inbox)
        #expect(Self.numbers(await group.value) == [6])
    }

    /// A runner whose task is done takes a queued task before it would wait.
    @Test func aRunnerTakesAQueuedTaskAtOnce() async {
        let inbox = JobInbox()
        inbox.offer(Self.job(3))
        #expect(await inbox.nextForRunner()?.request.requestID.low == 3)
        #expect(inbox.idleRunners == 0)
    }

    /// Runners beyond the limit end instead of waiting, so that a burst's runners do not keep
    /// their memory; finishing ends those that wait.
    @Test(.timeLimit(.minutes(1)))
    func runnersBeyondTheIdleLimitEndAndFinishEndsTheWaitingOnes() async throws {
        let inbox = JobInbox(idleLimit: 1)
        let waiting = Task { await inbox.nextForRunner() }
        try await eventually("a runner waits") { inbox.idleRunners == 1 }
        #expect(await inbox.nextForRunner() == nil, "a second runner would exceed the limit")
        inbox.finish()
        #expect(await waiting.value == nil)
        #expect(await inbox.nextForRunner() == nil, "finished")
    }
}
