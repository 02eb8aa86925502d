import SkyZMQ
import Testing

/// Inputs for a loop's thread: only the first of a batch asks for the marker, the
/// thread takes them all in order (trading them for an empty buffer of its own), and a stopped
/// queue refuses inputs and hands back what waited.
@Suite("Input queue")
struct InputQueueTests {
    @Test func onlyTheFirstInputOfABatchPostsTheMarker() {
        var queue = InputQueue<Int>()
        #expect(queue.append(1) == .first)
        #expect(queue.append(2) == .queued)
        #expect(queue.append(3) == .queued)
        var taken: [Int] = []
        queue.take(into: &taken)
        #expect(taken == [1, 2, 3])
        taken.removeAll(keepingCapacity: true)
        #expect(queue.append(4) == .first, "a taken queue is empty: the next input needs a marker")
        queue.take(into: &taken)
        #expect(taken == [4])
        taken.removeAll(keepingCapacity: true)
        queue.take(into: &taken)
        #expect(taken == [], "a second take finds nothing")
    }

    @Test func theTradedBuffersAreUsedAgain() {
        var queue = InputQueue<Int>()
        for value in 0..<100 { _ = queue.append(value) }
        var thread: [Int] = []
        queue.take(into: &thread)
        #expect(thread.count == 100)
        thread.removeAll(keepingCapacity: true)
        #expect(queue.append(7) == .first)
        #expect(queue.append(8) == .queued)
        queue.take(into: &thread)
        #expect(thread == [7, 8], "nothing of the earlier batch comes back")
        thread.removeAll(keepingCapacity: true)
        #expect(queue.append(9) == .first)
        var other: [Int] = []
        queue.take(into: &other)
        #expect(other == [9])
        #expect(other.capacity >= 100, "the thread's grown buffer, traded to the queue, held the next batch")
    }

    @Test func whatIsLeftInTheThreadsBufferIsDropped() {
        var queue = InputQueue<Int>()
        _ = queue.append(1)
        var buffer = [5, 6]
        queue.take(into: &buffer)
        #expect(buffer == [1])
        queue.take(into: &buffer)
        #expect(buffer == [], "the leftover 1 did not go back into the queue")
        #expect(queue.append(2) == .first)
    }

    @Test func aStoppedQueueRefusesInputsAndReturnsWhatWaited() {
        var queue = InputQueue<Int>()
        _ = queue.append(1)
        _ = queue.append(2)
        #expect(queue.stop() == [1, 2])
        #expect(queue.stopped)
        #expect(queue.append(3) == .refused)
        var taken: [Int] = []
        queue.take(into: &taken)
        #expect(taken == [])
        #expect(queue.stop() == [], "stopping twice returns nothing more")
    }
}
