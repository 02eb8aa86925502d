import SkyProtocol
import Testing

@testable import SkyWorkerKit

/// A cancellation decided on the I/O thread reaches the one task it names, whether it comes
/// before the task started or while it runs, and a slot given to a new task leaves the old
/// task cancelled and the new one alone.
@Suite("Worker: cancelling one running task")
struct TaskHandlesTests {
    let key = WorkerStateMachine.TaskKey(tag: [1], requestID: RequestID(high: 0, low: 1))
    let other = WorkerStateMachine.TaskKey(tag: [2], requestID: RequestID(high: 0, low: 2))

    /// Runs a task that attaches with `ticket`, detaches, and says whether it was cancelled by
    /// then.
    static func runIsCancelled(_ handles: TaskHandles, _ ticket: TaskHandles.Ticket) async -> Bool {
        let runner = RunnerHandle()
        let task = Task {
            handles.attach(ticket, runner: runner)
            defer { handles.detach(ticket) }
            return Task.isCancelled
        }
        runner.started(task)
        return await task.value
    }

    @Test func aCancelBeforeTheTaskAttachedReachesItWhenItDoes() async {
        let handles = TaskHandles()
        let ticket = handles.reserve(key, slot: 3)
        handles.cancel(key, slot: 3)
        #expect(await Self.runIsCancelled(handles, ticket))
        #expect(handles.count == 0)
    }

    @Test func aCancelReachesTheRunningTaskAndNoOther() async throws {
        let handles = TaskHandles()
        let (attached, attachedSink) = AsyncStream.makeStream(of: Void.self)
        func run(_ key: WorkerStateMachine.TaskKey, slot: Int) -> Task<Bool, Never> {
            let ticket = handles.reserve(key, slot: slot)
            let runner = RunnerHandle()
            let task = Task {
                handles.attach(ticket, runner: runner)
                defer { handles.detach(ticket) }
                attachedSink.yield()
                // Ends when cancelled; the other one is ended by the test below.
                while !Task.isCancelled { await Task.yield() }
                return true
            }
            runner.started(task)
            return task
        }
        let first = run(key, slot: 0)
        let second = run(other, slot: 1)
        var iterator = attached.makeAsyncIterator()
        _ = await iterator.next()
        _ = await iterator.next()
        handles.cancel(key, slot: 0)
        #expect(await first.value)
        #expect(!second.isCancelled)
        #expect(handles.count == 1)
        // A cancel naming another task's key in the running task's slot reaches nothing.
        handles.cancel(key, slot: 1)
        #expect(!second.isCancelled)
        second.cancel()
        _ = await second.value
        // Done and detached: a late cancel finds nothing.
        handles.cancel(other, slot: 1)
        #expect(handles.count == 0)
    }

    /// The I/O thread may cancel a runner's task after the runner attached but before the code
    /// that started it gave its handle: the cancel is kept and reaches the task then.
    @Test func aCancelBeforeTheRunnersHandleIsKnownReachesItOnceItIs() async {
        let handles = TaskHandles()
        let ticket = handles.reserve(key, slot: 0)
        let runner = RunnerHandle()
        let (attached, attachedSink) = AsyncStream.makeStream(of: Void.self)
        let (cancelled, cancelledSink) = AsyncStream.makeStream(of: Void.self)
        let task = Task {
            handles.attach(ticket, runner: runner)
            defer { handles.detach(ticket) }
            attachedSink.yield()
            for await _ in cancelled { break }
            // Ends when cancelled, or gives up after 10 s.
            let giveUp = ContinuousClock.now + .seconds(10)
            while !Task.isCancelled && ContinuousClock.now < giveUp { await Task.yield() }
            return Task.isCancelled
        }
        var iterator = attached.makeAsyncIterator()
        _ = await iterator.next()
        handles.cancel(key, slot: 0)
        cancelledSink.yield()
        #expect(!task.isCancelled, "no handle yet: kept")
        runner.started(task)
        #expect(await task.value && task.isCancelled)
        #expect(handles.count == 0)
    }

    /// The machine gives a slot to a new task once it dropped the old one (the connection
    /// changed): the old task, attaching late, finds its slot taken again and cancels itself;
    /// its late detach leaves the new task's entry, which a cancel still reaches.
    @Test func aSlotGivenToANewTaskCancelsTheOldOneAndKeepsTheNew() async {
        let handles = TaskHandles()
        let dropped = handles.reserve(key, slot: 0)
        let new = handles.reserve(other, slot: 0)
        #expect(dropped != new)
        #expect(
            await Self.runIsCancelled(handles, dropped),
            "the dropped task, attaching after its slot was given away, is cancelled")
        #expect(handles.count == 1, "its detach left the new task's entry")
        handles.cancel(other, slot: 0)
        #expect(
            await Self.runIsCancelled(handles, new),
            "the new task's cancel, kept until it attached, reached it")
        #expect(handles.count == 0)
    }

    /// The same request delivered again (a new tag) into the slot its dropped delivery had:
    /// the dropped child, attaching late, is cancelled; the new one runs untouched.
    @Test func aRedeliveryIntoTheSameSlotIsNotTheDroppedDelivery() async {
        let handles = TaskHandles()
        let again = WorkerStateMachine.TaskKey(tag: [9], requestID: key.requestID)
        let dropped = handles.reserve(key, slot: 0)
        let redelivered = handles.reserve(again, slot: 0)
        #expect(await Self.runIsCancelled(handles, dropped))
        #expect(handles.count == 1)
        #expect(!(await Self.runIsCancelled(handles, redelivered)))
        #expect(handles.count == 0)
    }
}
