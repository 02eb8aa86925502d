import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The broker's queue of waiting requests on its own: order by priority then arrival, dead
/// entries that stay until the head or compaction, and the times to look at a request again.
@Suite("Request queue: the broker's waiting requests, on their own")
struct RequestQueueTests {
    /// A request of service `service` and `priority`, `bytes` long, given the queue's next
    /// arrival number.
    private func request(
        _ queue: inout RequestQueue, _ low: UInt64, service: ServiceBook.Number = 0, priority: Int8 = 0,
        bytes: Int = 10
    ) -> BrokerStateMachine.QueuedRequest {
        BrokerStateMachine.QueuedRequest(
            client: 1,
            request: TaskRequest(
                requestID: RequestID(high: 0, low: low), service: "s\(service)",
                header: RequestHeader(priority: priority), body: [UInt8](repeating: 0, count: bytes)),
            arrival: queue.nextArrival(priority: priority) | UInt64(service), arrivedAt: 0)
    }

    private func drain(_ queue: inout RequestQueue, _ service: ServiceBook.Number = 0) -> [UInt64] {
        var order: [UInt64] = []
        while let task = queue.popFirst(service) { order.append(task.request.requestID.low) }
        return order
    }

    @Test func aHigherPriorityGoesAheadAndEachBandInItsOrder() {
        var queue = RequestQueue()
        for (low, priority) in [(1, 0), (2, 0), (3, 100), (4, -5), (5, 10), (6, 100)] as [(UInt64, Int8)] {
            queue.insert(request(&queue, low, priority: priority), expiry: .max)
        }
        #expect(queue.count == 6 && queue.count(of: 0) == 6)
        #expect(drain(&queue) == [3, 6, 5, 1, 2, 4])
        #expect(queue.count == 0 && queue.bytes == 0 && !queue.hasEntries(0))
    }

    @Test func aRequestBackFromALostWorkerGoesAheadOfYoungerOnes() {
        var queue = RequestQueue()
        let first = request(&queue, 1)
        queue.insert(request(&queue, 2), expiry: .max)
        queue.insert(request(&queue, 3), expiry: .max)
        // The first was at a worker; it comes back with its own arrival number.
        queue.insert(first, expiry: .max)
        #expect(drain(&queue) == [1, 2, 3])
    }

    @Test func eachServiceHasItsOwnCountsAndBytes() {
        var queue = RequestQueue()
        queue.insert(request(&queue, 1, service: 0, bytes: 10), expiry: .max)
        queue.insert(request(&queue, 2, service: 3, bytes: 20), expiry: .max)
        queue.insert(request(&queue, 3, service: 3, bytes: 30), expiry: .max)
        #expect(queue.count(of: 0) == 1 && queue.bytes(of: 0) == 10)
        #expect(queue.count(of: 3) == 2 && queue.bytes(of: 3) == 50)
        #expect(queue.count(of: 2) == 0 && queue.count(of: 1_000) == 0, "a number never used holds nothing")
        #expect(queue.count == 3 && queue.bytes == 60)
        #expect(drain(&queue, 3) == [2, 3])
        #expect(queue.count == 1 && queue.bytes == 10)
    }

    /// A dropped request leaves the counts and lets its body go at once; its entry stays, so the
    /// service's number stays in use, until it reaches the head.
    @Test func aDroppedRequestLeavesTheCountsAtOnceAndItsEntryAtTheHead() throws {
        var queue = RequestQueue()
        let first = request(&queue, 1, bytes: 100)
        let arrival = first.arrival
        queue.insert(first, expiry: .max)
        queue.insert(request(&queue, 2, bytes: 5), expiry: .max)
        let left = queue.drop(arrival: arrival)
        let dropped = try #require(left)
        #expect(dropped.client == 1 && dropped.bytes == 100)
        #expect(queue.drop(arrival: arrival) == nil, "once")
        #expect(queue.count == 1 && queue.bytes == 5 && queue.deadEntries == 1)
        #expect(queue.request(arrival: arrival)?.dropped == true)
        #expect(queue.request(arrival: arrival)?.request.body.isEmpty == true)
        #expect(queue.entryCounts.queued == 2)
        #expect(queue.oldest(0) != arrival, "the head is the next live one")
        #expect(queue.deadEntries == 0 && queue.entryCounts.queued == 1)
        _ = queue.popFirst(0)
        #expect(!queue.hasEntries(0))
    }

    @Test func aLaneOfDeadEntriesKeepsItsNumberInUse() {
        var queue = RequestQueue()
        let only = request(&queue, 1)
        let arrival = only.arrival
        queue.insert(only, expiry: .max)
        #expect(queue.drop(arrival: arrival) != nil)
        #expect(queue.count(of: 0) == 0 && queue.hasEntries(0))
        #expect(queue.popFirst(0) == nil && !queue.hasEntries(0))
    }

    @Test func timesToLookAgainComeDueInOrder() {
        var queue = RequestQueue()
        let late = request(&queue, 1)
        let early = request(&queue, 2)
        let (lateArrival, earlyArrival) = (late.arrival, early.arrival)
        queue.insert(late, expiry: 300)
        queue.insert(early, expiry: 100)
        #expect(queue.popDeadline(dueBy: 99) == nil)
        #expect(queue.popDeadline(dueBy: 1_000)?.arrival == earlyArrival)
        queue.lookAgain(at: 200, arrival: earlyArrival)
        #expect(queue.popDeadline(dueBy: 1_000)?.arrival == earlyArrival)
        #expect(queue.popDeadline(dueBy: 1_000)?.arrival == lateArrival)
        #expect(queue.popDeadline(dueBy: .max) == nil)
    }

    /// Compaction drops what the dead left, in the lanes and the heap, and keeps the earliest
    /// time of each live request as it was (a no-workers grace is not in the request).
    @Test func compactionKeepsEachLiveRequestsEarliestTimeAndDropsTheDead() {
        var queue = RequestQueue()
        var arrivals: [UInt64] = []
        for low in 0..<2_000 as Range<UInt64> {
            let task = request(&queue, low)
            arrivals.append(task.arrival)
            queue.insert(task, expiry: 1_000 + Int64(low))
        }
        for arrival in arrivals.dropFirst(10) { _ = queue.drop(arrival: arrival) }
        // A grace entry earlier than the first one's own time.
        queue.lookAgain(at: 5, arrival: arrivals[0])
        #expect(queue.entryCounts == (queued: 2_000, deadlines: 2_001))
        queue.compactIfMostlyDead()
        #expect(queue.entryCounts == (queued: 10, deadlines: 10))
        #expect(queue.deadEntries == 0 && queue.count == 10)
        let first = queue.popDeadline(dueBy: .max)
        #expect(first?.arrival == arrivals[0] && first?.expiry == 5)
        #expect(queue.popDeadline(dueBy: .max)?.expiry == 1_001)
    }

    @Test func arrivalNumbersAreNeverUsedTwiceSoAStaleOneFindsNothing() {
        var queue = RequestQueue()
        let task = request(&queue, 1)
        let arrival = task.arrival
        queue.insert(task, expiry: .max)
        #expect(queue.popFirst(0) != nil)
        queue.releaseStorage()
        queue.insert(request(&queue, 2), expiry: .max)
        #expect(queue.request(arrival: arrival) == nil)
        #expect(queue.drop(arrival: arrival) == nil && queue.count == 1)
    }
}
