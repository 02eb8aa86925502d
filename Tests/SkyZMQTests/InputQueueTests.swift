import SkyZMQ
import Testing

/// Inputs for a loop's thread: only the first of a batch asks for the marker, the
/// thread takes them all in order, and a stopped queue refuses inputs and hands back what waited.
@Suite("Input queue")
struct InputQueueTests {
    @Test func onlyTheFirstInputOfABatchPostsTheMarker() {
        var queue = InputQueue<Int>()
        #expect(queue.append(1) == .first)
        #expect(queue.append(2) == .queued)
        #expect(queue.append(3) == .queued)
        var taken = queue.take()
        #expect(taken == [1, 2, 3])
        queue.giveBack(&taken)
        #expect(queue.append(4) == .first, "a taken queue is empty: the next input needs a marker")
        #expect(queue.take() == [4])
        #expect(queue.take() == [], "a second take finds nothing")
    }

    @Test func aGivenBackBufferIsEmptiedAndUsedAgain() {
        var queue = InputQueue<Int>()
        for value in 0..<100 { _ = queue.append(value) }
        var taken = queue.take()
        queue.giveBack(&taken)
        #expect(taken.isEmpty)
        #expect(queue.append(7) == .first)
        #expect(queue.append(8) == .queued)
        var next = queue.take()
        #expect(next == [7, 8], "nothing of the earlier batch comes back")
        queue.giveBack(&next)
        #expect(queue.append(9) == .first)
        let third = queue.take()
        #expect(third == [9])
        #expect(third.capacity >= 100, "the buffer given back holds a later batch: no allocation")
    }

    @Test func aStoppedQueueRefusesInputsAndReturnsWhatWaited() {
        var queue = InputQueue<Int>()
        _ = queue.append(1)
        _ = queue.append(2)
        #expect(queue.stop() == [1, 2])
        #expect(queue.stopped)
        #expect(queue.append(3) == .refused)
        #expect(queue.take() == [])
        #expect(queue.stop() == [], "stopping twice returns nothing more")
    }
}
