import SkyProtocol
import Testing

@testable import SkyWorkerKit

/// A cancellation decided on the I/O thread reaches the one task it names, whether it comes
/// before the task started or while it runs.
@Suite("Worker: cancelling one running task")
struct TaskHandlesTests {
    let key = WorkerStateMachine.TaskKey(tag: [1], requestID: RequestID(high: 0, low: 1))
    let other = WorkerStateMachine.TaskKey(tag: [2], requestID: RequestID(high: 0, low: 2))

    @Test func aCancelBeforeTheTaskAttachedReachesItWhenItDoes() async {
        let handles = TaskHandles()
        handles.reserve(key)
        handles.cancel(key)
        let cancelled = await Task {
            handles.attachCurrentTask(key)
            defer { handles.detach(key) }
            return Task.isCancelled
        }.value
        #expect(cancelled)
        #expect(handles.count == 0)
    }

    @Test func aCancelReachesTheRunningTaskAndNoOther() async throws {
        let handles = TaskHandles()
        let (attached, attachedSink) = AsyncStream.makeStream(of: Void.self)
        func run(_ key: WorkerStateMachine.TaskKey) -> Task<Bool, Never> {
            handles.reserve(key)
            return Task {
                handles.attachCurrentTask(key)
                defer { handles.detach(key) }
                attachedSink.yield()
                // Ends when cancelled; the other one is ended by the test below.
                while !Task.isCancelled { await Task.yield() }
                return true
            }
        }
        let first = run(key)
        let second = run(other)
        var iterator = attached.makeAsyncIterator()
        _ = await iterator.next()
        _ = await iterator.next()
        handles.cancel(key)
        #expect(await first.value)
        #expect(!second.isCancelled)
        #expect(handles.count == 1)
        second.cancel()
        _ = await second.value
        // Done and detached: a late cancel finds nothing.
        handles.cancel(other)
        #expect(handles.count == 0)
    }
}
