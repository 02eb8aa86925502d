import SkyProtocol
import SkyTestSupport
import Testing

@testable import SkyWorkerKit

@Suite("Worker runtime: the hand-off of started tasks to the task group")
struct JobInboxTests {
    static func job(_ n: UInt64) -> SkyWorker.Job {
        SkyWorker.Job(
            key: WorkerStateMachine.TaskKey(tag: [UInt8(truncatingIfNeeded: n)], requestID: RequestID(high: 0, low: n)),
            ticket: TaskHandles.Ticket(slot: Int(n), use: 1),
            request: TaskRequest(
                requestID: RequestID(high: 0, low: n), service: "echo", body: [UInt8(truncatingIfNeeded: n)]))
    }

    static func numbers(_ jobs: [SkyWorker.Job]?) -> [UInt64]? { jobs?.map(\.request.requestID.low) }

    @Test func whatWasQueuedBeforeTheConsumerAskedComesInOneBatchInOrder() async {
        let inbox = JobInbox()
        inbox.yield([Self.job(1), Self.job(2)])
        inbox.yield([Self.job(3)])
        #expect(Self.numbers(await inbox.next()) == [1, 2, 3])
    }

    @Test(.timeLimit(.minutes(1)))
    func aWaitingConsumerIsResumedByTheNextBatch() async throws {
        let inbox = JobInbox()
        let consumer = Task { await inbox.next() }
        try await eventually("the consumer waits") { inbox.consumerWaits }
        inbox.yield([Self.job(7)])
        #expect(Self.numbers(await consumer.value) == [7])
        #expect(!inbox.consumerWaits)
    }

    @Test func finishEndsTheConsumerOnlyAfterItTookWhatWasQueued() async {
        let inbox = JobInbox()
        inbox.yield([Self.job(1)])
        inbox.finish()
        inbox.yield([Self.job(2)])
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
                    for n in 0..<each { inbox.yield([Self.job(producer * each + n)]) }
                }
            }
        }
        #expect(await consumer.value.sorted() == Array(0..<UInt64(producers) * each))
    }
}
