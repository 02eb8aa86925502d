import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Concurrency keys: a service's queued jobs taken round-robin across keys, priorities first,
/// each key held to its jobs' limit (``QueuedJobs``), and the scheduler keeping those places
/// through preparation, attempts, retries and restarts.
@Suite struct ConcurrencyKeyTests {
    /// A book of jobs and the queue, driven by hand.
    final class Queue {
        var queued = QueuedJobs()
        var rates = KeyRateBook()
        var jobs: [JobID: JobBook.Job] = [:]
        var arrivals: UInt64 = 0
        var names: [JobID: String] = [:]

        /// Queues a job of `key` (nil: none) named `name`.
        func add(_ name: String, key: String?, limit: UInt32 = 0, priority: Int8 = 0) {
            arrivals += 1
            var submission = JobSubmission(service: "s", body: [])
            submission.concurrencyKey = key
            submission.concurrencyLimit = limit
            submission.priority = priority
            var random = SplitMix64(seed: arrivals)
            let id = JobID(milliseconds: Int64(arrivals), random: &random)
            let job = JobBook.Job(
                id: id, submission: submission, attempt: 0, notBefore: 0, phase: .queued, arrival: arrivals)
            jobs[id] = job
            names[id] = name
            queued.insert(job)
        }

        /// Takes the next `count` jobs' names (fewer if the queue gives none).
        func take(_ count: Int) -> [String] {
            var taken: [String] = []
            while taken.count < count, let (id, _) = queued.pop("s", in: jobs, rates: &rates) {
                jobs[id]?.phase = .preparing
                taken.append(names[id]!)
            }
            return taken
        }

        /// Cancels the queued job named `name`.
        func cancel(_ name: String) {
            let id = names.first { $0.value == name }!.key
            jobs[id]?.phase = .finishing(JobReport(state: .cancelled))
            queued.unmark("s", key: jobs[id]!.submission.concurrencyKey ?? "")
        }
    }

    @Test func keysTakeTurnsAndANewKeyGoesNext() {
        let queue = Queue()
        for index in 1...10 { queue.add("a\(index)", key: "A") }
        #expect(queue.take(2) == ["a1", "a2"])
        for index in 1...3 { queue.add("b\(index)", key: "B") }
        // B came after A had two turns: it goes at once, then the two alternate.
        #expect(queue.take(8) == ["b1", "a3", "b2", "a4", "b3", "a5", "a6", "a7"])
        #expect(queue.queued.count(of: "s", key: "A") == 3)
        #expect(queue.queued.total == 3)
    }

    @Test func jobsWithoutAKeyTakeTheirTurnsAsOneKey() {
        let queue = Queue()
        for index in 1...4 { queue.add("n\(index)", key: nil) }
        queue.add("a1", key: "A")
        queue.add("b1", key: "B")
        queue.add("a2", key: "A")
        #expect(queue.take(7) == ["n1", "a1", "b1", "n2", "a2", "n3", "n4"])
    }

    @Test func priorityComesBeforeTurns() {
        let queue = Queue()
        for index in 1...3 { queue.add("a\(index)", key: "A") }
        queue.add("b1", key: "B")
        queue.add("b2", key: "B", priority: 50)
        // B's head is now of higher priority: B goes first, twice, whatever the turns say.
        #expect(queue.take(1) == ["b2"])
        #expect(queue.take(1) == ["a1"])
        #expect(queue.take(4) == ["b1", "a2", "a3"])
    }

    @Test func aKeyAtItsLimitIsParkedUntilAPlaceIsVacated() {
        let queue = Queue()
        for index in 1...3 { queue.add("a\(index)", key: "A", limit: 1) }
        queue.add("b1", key: "B", limit: 2)
        queue.add("b2", key: "B", limit: 2)
        queue.add("b3", key: "B", limit: 2)
        #expect(queue.take(10) == ["a1", "b1", "b2"])
        #expect(queue.queued.placed(of: "s", key: "A") == 1)
        #expect(queue.queued.placed(of: "s", key: "B") == 2)
        // A's place comes back: A has queued jobs (the caller prepares).
        let aWaits = queue.queued.vacate("s", key: "A", in: queue.jobs)
        #expect(aWaits)
        #expect(queue.take(10) == ["a2"])
        let bWaitsAgain = queue.queued.vacate("s", key: "B", in: queue.jobs)
        let aWaitsAgain = queue.queued.vacate("s", key: "A", in: queue.jobs)
        #expect(bWaitsAgain && aWaitsAgain)
        #expect(queue.take(10) == ["b3", "a3"])
        // Nothing of A waits any more.
        let aWaitsAtLast = queue.queued.vacate("s", key: "A", in: queue.jobs)
        #expect(!aWaitsAtLast)
        #expect(queue.queued.isEmpty)
    }

    @Test func aCancelledHeadIsSkippedAndAnEmptiedKeyForgotten() {
        let queue = Queue()
        queue.add("a1", key: "A")
        queue.add("a2", key: "A")
        queue.add("b1", key: "B")
        queue.cancel("a1")
        queue.cancel("b1")
        #expect(queue.queued.keyCount(of: "s") == 1)
        #expect(queue.take(5) == ["a2"])
        #expect(queue.queued.keyCount(of: "s") == 0)
        #expect(queue.queued.isEmpty)
    }

    @Test func aReturningKeyGetsNoTurnsForItsAbsence() {
        let queue = Queue()
        for index in 1...6 { queue.add("a\(index)", key: "A") }
        queue.add("b1", key: "B")
        #expect(queue.take(2) == ["a1", "b1"])
        #expect(queue.take(3) == ["a2", "a3", "a4"])
        // B comes back after A had three turns alone: one turn, not three.
        queue.add("b2", key: "B")
        queue.add("b3", key: "B")
        #expect(queue.take(4) == ["b2", "a5", "b3", "a6"])
    }

    @Test func staleTurnsAreDroppedOnceTheyOutnumberTheLiveOnes() {
        let queue = Queue()
        // Each key's head is raised 20 times: 2,000 turns pushed for 100 keys.
        for key in 0..<100 {
            for step in 0..<20 { queue.add("k\(key)-\(step)", key: "K\(key)", priority: Int8(step)) }
        }
        let rotation = queue.queued.keyCount(of: "s")
        #expect(rotation == 100)
        #expect(queue.take(2000).count == 2000)
        #expect(queue.queued.isEmpty)
    }

    // MARK: The scheduler

    private static func keyed(_ key: String, limit: UInt32) -> (inout JobSubmission) -> Void {
        { submission in
            submission.concurrencyKey = key
            submission.concurrencyLimit = limit
        }
    }

    @Test func aLimitOfOneStartsTheKeysNextJobOnlyOnceTheLastEnded() {
        var harness = SchedulerHarness()
        _ = harness.commit(harness.joined(capacity: 4))
        var ids: [JobID] = []
        for index in 0..<3 {
            let (id, followed) = harness.submit(
                RequestID(high: 1, low: UInt64(index)), change: Self.keyed("customer-42", limit: 1))
            _ = harness.commit(followed)
            ids.append(id)
        }
        let (other, followed) = harness.submit(RequestID(high: 2, low: 9), change: Self.keyed("customer-7", limit: 1))
        _ = harness.commit(followed)
        // One start of each key is prepared, though the pipeline has room for 32.
        let first = harness.dispatch(tag: 1)
        let second = harness.dispatch(tag: 2)
        #expect(Set([first?.id, second?.id]) == Set([ids[0], other]))
        let third = harness.dispatch(tag: 3)
        #expect(third == nil)
        // The first ends: customer-42's next is prepared and goes.
        let ended = harness.ended(TaskReply(requestID: ids[0].requestID, status: .ok, body: []))
        _ = harness.commit(ended)
        let fourth = harness.dispatch(tag: 4)
        let fifth = harness.dispatch(tag: 5)
        #expect(fourth?.id == ids[1])
        #expect(fifth == nil)
        // A failed attempt that waits for its retry gives its place up too.
        let failed = harness.ended(TaskReply(requestID: ids[1].requestID, status: .deadlineExceeded, body: []))
        _ = harness.commit(failed)
        let sixth = harness.dispatch(tag: 6)
        #expect(sixth?.id == ids[2])
        // Its worker is lost: the job waits again, its place given up and taken again by it (it
        // is the key's oldest), and nothing else of the key goes meanwhile.
        var lost: [JobScheduler.Action] = []
        #expect(harness.scheduler.deliveryLost(ids[2].requestID, worker: "w1", into: &lost) == .requeued)
        // The broker prepares the services a lost worker's work came back to.
        harness.scheduler.prepare(SchedulerHarness.service, into: &lost)
        _ = harness.commit(lost)
        let again = harness.dispatch(tag: 7)
        let none = harness.dispatch(tag: 8)
        #expect(again?.id == ids[2] && none == nil)
    }

    @Test func aKeyAndItsLimitAreRecordedAndHoldAfterARestart() {
        var harness = SchedulerHarness()
        var submission = JobSubmission(service: SchedulerHarness.service, body: [7])
        Self.keyed("tenant-1", limit: 1)(&submission)
        let actions = harness.request(BrokerService.jobSubmit, submission.encode(), RequestID(high: 1, low: 1))
        let records = changes(in: actions).compactMap { change -> JobRecord? in
            guard case .submitted(let record) = change else { return nil }
            return record
        }
        let decoded = try? JobSubmission(decoding: records.first?.options ?? [])
        #expect(decoded?.concurrencyKey == "tenant-1")
        #expect(decoded?.concurrencyLimit == 1)
        // A broker that starts from the journal holds the key's two jobs to one at a time.
        var restarted = SchedulerHarness()
        var twice = records[0]
        var random = SplitMix64(seed: 5)
        twice.id = JobID(milliseconds: 5, random: &random).bytes
        var recoverActions: [JobScheduler.Action] = []
        _ = restarted.scheduler.recover([records[0], twice], now: 0, into: &recoverActions)
        _ = restarted.commit(recoverActions)
        _ = restarted.commit(restarted.joined(capacity: 4))
        let one = restarted.dispatch(tag: 1)
        let two = restarted.dispatch(tag: 2)
        #expect(one != nil)
        #expect(two == nil)
    }
}
