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

    /// A service's number goes to another service once its lane is empty: the per-key limit of
    /// the first does not follow the number to the second.
    @Test func aLanesNumberGivenToAnotherServiceLeavesTheFirstsLimitBehind() {
        var queue = RequestQueue()
        var rates = KeyRateBook()
        _ = rates.set("s0", RateLimit(perSecond: 1, burst: 1, key: KeyScope()))
        queue.insert(request(&queue, 1), expiry: .max)
        #expect(queue.popFirst(0, rates: &rates) != nil, "s0's one token")
        // Lane 0 is empty; its number now names "other", which has no limit.
        var other = request(&queue, 2)
        other.request.service = "other"
        queue.insert(other, expiry: .max)
        var another = request(&queue, 3)
        another.request.service = "other"
        queue.insert(another, expiry: .max)
        #expect(queue.oldest(0, rates: &rates) != nil && queue.popFirst(0, rates: &rates) != nil)
        #expect(queue.oldest(0, rates: &rates) != nil, "not held by s0's spent bucket")
    }

    /// A request of `key` (with its `limit`), as ``request(_:_:service:priority:bytes:)``.
    private func keyed(
        _ queue: inout RequestQueue, _ low: UInt64, key: String, limit: UInt32 = 0, priority: Int8 = 0
    ) -> BrokerStateMachine.QueuedRequest {
        var task = request(&queue, low, priority: priority)
        task.request.concurrencyKey = key
        task.request.concurrencyLimit = limit
        return task
    }

    private func drain(_ queue: inout RequestQueue, _ service: ServiceBook.Number = 0) -> [UInt64] {
        var rates = KeyRateBook()
        var order: [UInt64] = []
        while let task = queue.popFirst(service, rates: &rates) { order.append(task.request.requestID.low) }
        return order
    }

    /// Once a request with a key comes, the lane takes turns: round-robin across keys, the
    /// requests without a key as one key, priority bands first.
    @Test func keysTakeTurnsOnceOneCame() {
        var queue = RequestQueue()
        for low: UInt64 in 1...3 { queue.insert(request(&queue, low), expiry: .max) }
        #expect(!queue.takesTurns(0))
        for low: UInt64 in 11...14 { queue.insert(keyed(&queue, low, key: "A"), expiry: .max) }
        for low: UInt64 in 21...22 { queue.insert(keyed(&queue, low, key: "B"), expiry: .max) }
        queue.insert(keyed(&queue, 31, key: "C", priority: 100), expiry: .max)
        #expect(queue.takesTurns(0) && queue.count(of: 0) == 10)
        #expect(drain(&queue) == [31, 1, 11, 21, 2, 12, 22, 3, 13, 14])
        #expect(queue.count == 0 && queue.bytes == 0 && !queue.hasEntries(0), "back to plain order")
    }

    /// A key at its limit is passed over until a place is given up; one that went to a worker
    /// at once (nothing waited) holds a place too.
    @Test func aKeyAtItsLimitWaitsForAPlace() throws {
        var queue = RequestQueue()
        var rates = KeyRateBook()
        #expect(queue.mayStart(0, key: "A", limit: 1))
        queue.placeDirectly(0, key: "A")
        #expect(!queue.mayStart(0, key: "A", limit: 1) && queue.mayStart(0, key: "A", limit: 2))
        queue.insert(keyed(&queue, 1, key: "A", limit: 1), expiry: .max)
        queue.insert(keyed(&queue, 2, key: "A", limit: 1), expiry: .max)
        queue.insert(keyed(&queue, 3, key: "B", limit: 1), expiry: .max)
        let next = queue.oldest(0, rates: &rates)
        #expect(next != nil)
        #expect(drain(&queue) == [3], "A is at its limit, B takes its place")
        let none = queue.oldest(0, rates: &rates)
        #expect(queue.count == 2 && none == nil)
        let aWaits = queue.vacate(0, key: "A")
        #expect(aWaits, "A's requests wait")
        #expect(drain(&queue) == [1])
        let bWaits = queue.vacate(0, key: "B")
        let aWaitsAgain = queue.vacate(0, key: "A")
        #expect(!bWaits && aWaitsAgain)
        #expect(drain(&queue) == [2])
        // Answered, not run: a parked key's requests are taken too, holding no place.
        queue.insert(keyed(&queue, 4, key: "A", limit: 1), expiry: .max)
        let popped = queue.popToAnswer(0)
        let answered = try #require(popped)
        #expect(answered.request.requestID.low == 4 && queue.count == 0)
        let aWaitsAtLast = queue.vacate(0, key: "A")
        #expect(!aWaitsAtLast)
        #expect(!queue.hasEntries(0), "nothing waits and no place is held")
    }

    /// A dropped keyed request is found by its arrival, leaves the counts, and an emptied key
    /// leaves the turns with its dead entries.
    @Test func aDroppedKeyedRequestLeavesItsKey() throws {
        var queue = RequestQueue()
        let first = keyed(&queue, 1, key: "A")
        let arrival = first.arrival
        queue.insert(first, expiry: .max)
        queue.insert(keyed(&queue, 2, key: "B"), expiry: .max)
        queue.update(arrival: arrival) { $0.request.header.attempt = 3 }
        #expect(queue.request(arrival: arrival)?.request.header.attempt == 3)
        let dropped = queue.drop(arrival: arrival)
        #expect(dropped != nil)
        #expect(queue.count == 1 && queue.deadEntries == 0 && queue.entryCounts.queued == 1)
        #expect(drain(&queue) == [2])
        #expect(!queue.hasEntries(0))
        // A key's last live request taken: the dead entries behind it go with the key.
        queue.insert(keyed(&queue, 3, key: "A"), expiry: .max)
        let behind = keyed(&queue, 4, key: "A")
        let behindArrival = behind.arrival
        queue.insert(behind, expiry: .max)
        queue.insert(keyed(&queue, 5, key: "B"), expiry: .max)
        #expect(queue.drop(arrival: behindArrival) != nil)
        #expect(queue.deadEntries == 1)
        #expect(drain(&queue) == [3, 5])
        #expect(queue.deadEntries == 0 && queue.entryCounts.queued == 0 && !queue.hasEntries(0))
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
        var rates = KeyRateBook()
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
        #expect(queue.oldest(0, rates: &rates) != arrival, "the head is the next live one")
        #expect(queue.deadEntries == 0 && queue.entryCounts.queued == 1)
        _ = queue.popFirst(0, rates: &rates)
        #expect(!queue.hasEntries(0))
    }

    @Test func aLaneOfDeadEntriesKeepsItsNumberInUse() {
        var queue = RequestQueue()
        var rates = KeyRateBook()
        let only = request(&queue, 1)
        let arrival = only.arrival
        queue.insert(only, expiry: .max)
        #expect(queue.drop(arrival: arrival) != nil)
        #expect(queue.count(of: 0) == 0 && queue.hasEntries(0))
        #expect(queue.popFirst(0, rates: &rates) == nil && !queue.hasEntries(0))
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

    /// Queues `count` requests whose times to look again are `start`, `start` + 1, …; returns
    /// their arrival numbers in order.
    func insert(_ count: UInt64, into queue: inout RequestQueue, expiringFrom start: Int64) -> [UInt64] {
        (0..<count).map { low in
            let task = request(&queue, low)
            let arrival = task.arrival
            queue.insert(task, expiry: start + Int64(low))
            return arrival
        }
    }

    /// Compaction drops what the dead left, in the lanes and the deadline queue, and keeps the
    /// times of live requests as they were (a no-workers grace is not in the request).
    @Test func compactionKeepsEachLiveRequestsEarliestTimeAndDropsTheDead() {
        var queue = RequestQueue()
        let arrivals = insert(2_000, into: &queue, expiringFrom: 1_000)
        for arrival in arrivals.dropFirst(10) { _ = queue.drop(arrival: arrival) }
        // A grace entry earlier than the first one's own time.
        queue.lookAgain(at: 5, arrival: arrivals[0])
        #expect(queue.entryCounts == (queued: 2_000, deadlines: 2_001))
        queue.compactIfMostlyDead()
        // The dead went; the live ones' entries are few enough to keep, the grace's too.
        #expect(queue.entryCounts == (queued: 10, deadlines: 11))
        #expect(queue.deadEntries == 0 && queue.count == 10)
        let first = queue.popDeadline(dueBy: .max)
        #expect(first?.arrival == arrivals[0] && first?.expiry == 5)
        #expect(queue.popDeadline(dueBy: .max)?.expiry == 1_000)
        #expect(queue.popDeadline(dueBy: .max)?.expiry == 1_001)
    }

    /// Live requests with several entries each (graces looked at again, requests queued again
    /// after lost workers) that outweigh them even with the dead gone keep one each, the
    /// earliest.
    @Test func compactionKeepsOneEntryALiveRequestWhenTheirEntriesOutweighThem() {
        var queue = RequestQueue()
        let arrivals = insert(400, into: &queue, expiringFrom: 10_000)
        for arrival in arrivals {
            queue.lookAgain(at: 20_000, arrival: arrival)
            queue.lookAgain(at: 30_000, arrival: arrival)
        }
        #expect(queue.entryCounts == (queued: 400, deadlines: 1_200))
        queue.compactIfMostlyDead()
        #expect(queue.entryCounts == (queued: 400, deadlines: 400))
        var seen = 0
        while let next = queue.popDeadline(dueBy: .max) {
            #expect(next.expiry == 10_000 + Int64(seen))
            #expect(next.arrival == arrivals[seen])
            seen += 1
        }
        #expect(seen == 400)
    }

    /// The same in a lane of keyed requests: the dispatched ones' times go, the waiting ones'
    /// stay, and those of requests cancelled while they wait (still in their key's queue) go.
    @Test func compactionReadsAKeyedLaneToo() {
        var queue = RequestQueue()
        var rates = KeyRateBook()
        var arrivals: [UInt64] = []
        for low in 0..<2_000 as Range<UInt64> {
            var task = request(&queue, low)
            task.request.concurrencyKey = "k"
            arrivals.append(task.arrival)
            queue.insert(task, expiry: 1_000 + Int64(low))
        }
        for _ in 0..<1_990 { #expect(queue.popFirst(0, rates: &rates) != nil) }
        for arrival in arrivals.suffix(5) { #expect(queue.drop(arrival: arrival) != nil) }
        queue.compactIfMostlyDead()
        #expect(queue.count == 5)
        #expect(queue.entryCounts.deadlines == 5)
        #expect(queue.popDeadline(dueBy: .max)?.arrival == arrivals[1_990])
    }

    @Test func arrivalNumbersAreNeverUsedTwiceSoAStaleOneFindsNothing() {
        var queue = RequestQueue()
        var rates = KeyRateBook()
        let task = request(&queue, 1)
        let arrival = task.arrival
        queue.insert(task, expiry: .max)
        #expect(queue.popFirst(0, rates: &rates) != nil)
        queue.releaseStorage()
        queue.insert(request(&queue, 2), expiry: .max)
        #expect(queue.request(arrival: arrival) == nil)
        #expect(queue.drop(arrival: arrival) == nil && queue.count == 1)
    }
}
