import Foundation
import SkyTestSupport
import Synchronization
import Testing

@testable import SkyZMQ

@Suite("libzmq wrapper: the I/O thread as a task executor")
struct ZMQEventLoopExecutorTests {
    @Test(.timeLimit(.minutes(1)))
    func aTaskThatPrefersTheLoopRunsOnItsThreadAndSoDoItsChildren() async throws {
        let loop = try await ZMQEventLoop.start(name: "sky-exec-io", sockets: [])
        let (outside, inside, children) = await withTaskExecutorPreference(loop) {
            let inside = currentThreadName()
            let children = await withTaskGroup(of: String.self) { group in
                for _ in 0..<8 { group.addTask { currentThreadName() } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            return (loop.isOnLoopThread, inside, children)
        }
        #expect(outside)
        #expect(inside == "sky-exec-io")
        #expect(children == Array(repeating: "sky-exec-io", count: 8))
        #expect(!loop.isOnLoopThread)
        await loop.shutdown()
    }

    /// What the thread posts to itself needs no wake-up: that is the point of running there.
    @Test(.timeLimit(.minutes(1)))
    func postsFromTheLoopsOwnThreadSignalNothingAndStillArrive() async throws {
        let (loop, inputs) = try await loopEchoingInputs(name: "sky-exec-post")
        let signals = await withTaskExecutorPreference(loop) {
            let before = loop.wakeSignals.load(ordering: .relaxed)
            for value in 0..<100 {
                loop.post(input: value)
                // Suspends and comes back on the loop's thread, which took the posts meanwhile.
                if value % 10 == 9 { await Task.yield() }
            }
            return loop.wakeSignals.load(ordering: .relaxed) - before
        }
        #expect(signals == 0)
        var received: [Int] = []
        for await value in inputs {
            received.append(value)
            if received.count == 100 { break }
        }
        #expect(received == Array(0..<100))
        // From another thread, a post signals the sleeping thread.
        let before = loop.wakeSignals.load(ordering: .relaxed)
        _ = try await onThread { loop.post(input: 100) }
        #expect(loop.wakeSignals.load(ordering: .relaxed) > before)
        await loop.shutdown()
    }

    /// A task that still prefers a loop that stopped runs on Swift's global executor instead of
    /// waiting forever for a thread that is gone.
    @Test(.timeLimit(.minutes(1)))
    func aTaskThatPrefersAStoppedLoopStillRuns() async throws {
        let loop = try await ZMQEventLoop.start(name: "sky-exec-gone", sockets: [])
        let (stopped, stop) = AsyncStream.makeStream(of: Void.self)
        let running = Task {
            await withTaskExecutorPreference(loop) {
                var names = [currentThreadName()]
                for await _ in stopped { break }
                // Resumed after the loop stopped.
                names.append(currentThreadName())
                await Task.yield()
                names.append(currentThreadName())
                return names
            }
        }
        await Task.yield()
        await loop.shutdown()
        stop.yield()
        let names = await running.value
        #expect(names.count == 3)
        #expect(names.dropFirst().allSatisfy { $0 != "sky-exec-gone" })
    }
}

/// An executor that hands its jobs to a loop, as a client's does (it exists before its loop).
final class ForwardingExecutor: TaskExecutor {
    let loop: ZMQEventLoop
    /// Whether jobs run as this executor (right) or as the loop (what the first version did).
    let runsAsItself: Bool

    init(loop: ZMQEventLoop, runsAsItself: Bool) {
        self.loop = loop
        self.runsAsItself = runsAsItself
    }

    func enqueue(_ job: consuming ExecutorJob) {
        if runsAsItself {
            loop.enqueue(job, as: asUnownedTaskExecutor())
        } else {
            loop.enqueue(job)
        }
    }
}

/// A step that suspends: its result comes from another task, so the caller is resumed through
/// its preferred executor and then hops between executors as a real call path does.
@inline(never)
func nonisolatedStep(_ value: Int) async -> Int {
    await Task { value }.value
}

extension ZMQEventLoopExecutorTests {
    /// A job of a forwarding executor runs as that executor: the task's later hops then find it
    /// on its preferred executor and go on inline. Run as the loop instead, every hop was queued
    /// again (13 jobs per client call in the profile, against 2).
    @Test(.timeLimit(.minutes(1)))
    func aForwardingExecutorsJobsRunAsItsOwnSoItsTasksHopInline() async throws {
        let loop = try await ZMQEventLoop.start(name: "sky-exec-fwd", sockets: [])
        var counts: [Bool: Int] = [:]
        for runsAsItself in [true, false] {
            let executor = ForwardingExecutor(loop: loop, runsAsItself: runsAsItself)
            let before = loop.jobsRun.load(ordering: .relaxed)
            let sum = await withTaskExecutorPreference(executor) {
                var sum = 0
                for value in 0..<100 { sum += await nonisolatedStep(value) }
                return sum
            }
            #expect(sum == 4950)
            counts[runsAsItself] = loop.jobsRun.load(ordering: .relaxed) - before
        }
        print("jobs for 100 steps: as itself \(counts[true] ?? -1), as the loop \(counts[false] ?? -1)")
        #expect((counts[true] ?? .max) < (counts[false] ?? 0))
        await loop.shutdown()
    }
}
