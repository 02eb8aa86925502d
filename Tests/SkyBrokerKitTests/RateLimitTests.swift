import SkyJSON
import SkyJournal
import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Rate limits: a limited service's calls and jobs start at most at its rate after one burst,
/// the broker waking for each token; a call that would wait past its deadline is answered at
/// once saying so; limits are set, replaced and removed through `mmi.limits.*`, kept in the
/// journal (undone if the write fails), and the broker's flag applies where none is set.
@Suite("Broker state machine: rate limits")
struct RateLimitTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let admin = PeerID([0, 0, 0, 0, 2])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    /// A broker whose flag limits `sky.scan`.
    static func limited(_ limit: RateLimit, journal: Bool = false) -> BrokerHarness {
        BrokerHarness.withJournal {
            $0.journal = journal
            $0.rateLimits = ["sky.scan": limit]
        }
    }

    /// Wakes the machine at each time it asks for, as the shell's alarm does, until `end`;
    /// commits journal writes on the way. Returns what it did.
    static func wakeUntil(_ end: MonotonicInstant, _ broker: inout BrokerHarness) -> [BrokerAction] {
        var actions: [BrokerAction] = []
        while let wake = broker.machine.nextRateWake, wake <= end {
            broker.now = max(broker.now, wake)
            var woke: [BrokerAction] = []
            broker.machine.rateWake(now: broker.now, into: &woke)
            woke = broker.record(woke)
            actions += woke + broker.commit(woke)
        }
        broker.now = end
        return actions
    }

    @Test func callsStartAtTheRateAfterOneBurstAndTheBrokerWakesForEachToken() throws {
        var broker = Self.limited(RateLimit(perSecond: 10, burst: 3))
        _ = broker.ready(worker1, capacity: 100)
        let start = broker.now
        var sent: [RequestID] = []
        for index in 0..<20 {
            sent += dispatched(broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60)))
                .map(\.1)
        }
        #expect(sent.count == 3, "the burst")
        let wake = try #require(broker.machine.nextRateWake)
        #expect(wake - start == .milliseconds(100), "woken for the next token, not at the next tick")
        let second = dispatched(Self.wakeUntil(start + .seconds(1), &broker)).map(\.1)
        #expect(second.count == 10, "10 a second after the burst")
        #expect(sent + second == (0..<13).map { RequestID(high: 1, low: UInt64($0)) }, "in order")
        #expect(dispatched(Self.wakeUntil(start + .seconds(2), &broker)).count == 7, "the rest")
        #expect(broker.machine.nextRateWake == nil, "nothing waits: no wake-ups")
        // A quiet spell refills the burst, no more.
        broker.now = start + .seconds(5)
        var more = 0
        for index in 0..<5 {
            more +=
                dispatched(broker.request(client, RequestID(high: 2, low: UInt64(index)), timeout: .seconds(60))).count
        }
        #expect(more == 3)
        let listing = broker.machine.limitListing().limits
        #expect(listing.map(\.started) == [23] && listing.map(\.source) == ["flag"])
    }

    @Test func aCallThatWouldWaitPastItsDeadlineIsAnsweredAtOnceWithTheWait() throws {
        var broker = Self.limited(RateLimit(perSecond: 10, burst: 1))
        _ = broker.ready(worker1, capacity: 100)
        for index in 0..<6 {
            _ = broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60))
        }
        // One started; five wait, the fifth's token due in 500 ms; this one's would be at 600 ms.
        let late = RequestID(high: 2, low: 1)
        let answer = try #require(replies(broker.request(client, late, timeout: .milliseconds(300)), to: late).first)
        #expect(answer.status == .overloaded)
        let body = RemoteErrorBody(decoding: answer.body)
        #expect(body.type == RemoteErrorBody.rateLimitedType && body.retryAfterMs == 600, "\(body)")
        #expect(body.message.contains("limited to 10/s") && body.message.contains("5 calls wait ahead"))
        let patient = RequestID(high: 2, low: 2)
        #expect(replies(broker.request(client, patient, timeout: .seconds(2)), to: patient).isEmpty, "it may wait")
        #expect(broker.machine.limitListing().limits.first?.refused == 1)
    }

    @Test func jobsTakeTheSameTokensAsCalls() {
        var broker = Self.limited(RateLimit(perSecond: 5, burst: 2), journal: true)
        _ = broker.ready(worker1, capacity: 100)
        let start = broker.now
        var started: [RequestID] = []
        for index in 0..<10 {
            let asked = broker.request(
                client, RequestID(high: 3, low: UInt64(index)), service: BrokerService.jobSubmit,
                body: JobSubmission(service: "sky.scan", body: [7]).encode())
            started += broker.settle(asked)
        }
        #expect(started.count == 2, "the burst")
        let call = RequestID(high: 4, low: 1)
        #expect(dispatched(broker.request(client, call, timeout: .seconds(60))).isEmpty, "a call waits its turn too")
        var later = Self.wakeUntil(start + .seconds(1), &broker)
        later += broker.commit(later)
        #expect(dispatched(later).count == 5, "5 a second, the call among them")
        #expect(dispatched(later).first?.1 == call, "calls first")
    }

    @Test func aLimitIsSetReplacedAndRemovedAndTheFlagsAppliesWhereNoneIsSet() throws {
        var broker = Self.limited(RateLimit(perSecond: 1, burst: 1), journal: true)
        func control(_ service: String, _ body: [UInt8], failing: JournalError? = nil) -> [TaskReply] {
            let id = RequestID(high: 0xAD, low: UInt64.random(in: 1...UInt64.max))
            let asked = broker.request(admin, id, service: service, body: body)
            return replies(asked + broker.commit(asked, failing: failing), to: id)
        }
        func set(_ perSecond: Double, _ burst: Int, failing: JournalError? = nil) -> [TaskReply] {
            let body = try! CanonicalJSON.encode(
                ServiceRateLimit(service: "sky.scan", limit: RateLimit(perSecond: perSecond, burst: burst)))
            return control(BrokerService.limitSet, body, failing: failing)
        }
        func listing() throws -> [RateLimitState] {
            try CanonicalJSON.decode(
                RateLimitListing.self, from: try #require(control(BrokerService.limitList, []).first).body
            ).limits
        }
        #expect(try listing().map(\.source) == ["flag"])
        let written = broker.request(
            admin, RequestID(high: 9, low: 9), service: BrokerService.limitSet,
            body: try CanonicalJSON.encode(
                ServiceRateLimit(service: "sky.scan", limit: RateLimit(perSecond: 100, burst: 20))))
        #expect(replies(written, to: RequestID(high: 9, low: 9)).isEmpty, "answered once on disk")
        #expect(journalWrites(written).count == 1)
        #expect(replies(broker.commit(written), to: RequestID(high: 9, low: 9)).map(\.body) == [[1]])
        #expect(try listing().map { "\($0.limit.rateText) \($0.burst) \($0.source)" } == ["100/s 20 set"])
        #expect(set(100, 20).map(\.body) == [[0]], "the same limit changes nothing")
        // A write that fails is undone, and its caller told; so is the log, which said "rate
        // limit set" when it took effect (it never said the undo).
        let failing = broker.request(
            admin, RequestID(high: 9, low: 10), service: BrokerService.limitSet,
            body: try CanonicalJSON.encode(
                ServiceRateLimit(service: "sky.scan", limit: RateLimit(perSecond: 5, burst: 5))))
        let undone = broker.commit(failing, failing: .failed(path: "j", operation: "write", reason: "disk full"))
        #expect(replies(undone, to: RequestID(high: 9, low: 10)).map(\.status) == [.journalUnavailable])
        #expect(logs(failing + undone) == ["rate limit set", "rate limit change undone: it could not be recorded"])
        #expect(try listing().map(\.perSecond) == [100])
        // Removed, the flag's applies again.
        #expect(control(BrokerService.limitRemove, Array("sky.scan".utf8)).map(\.body) == [[1]])
        #expect(try listing().map { "\($0.limit.rateText) \($0.source)" } == ["1/s flag"])
        #expect(control(BrokerService.limitRemove, Array("sky.scan".utf8)).map(\.body) == [[0]])
    }

    @Test func limitsTheBrokerCannotKeepAreRefusedSayingWhy() throws {
        var broker = BrokerHarness.withJournal()
        func set(_ body: [UInt8]) -> TaskReply? {
            let id = RequestID(high: 0xAD, low: UInt64.random(in: 1...UInt64.max))
            return replies(broker.request(admin, id, service: BrokerService.limitSet, body: body), to: id).first
        }
        func limit(_ service: String, _ perSecond: Double, _ burst: Int) throws -> [UInt8] {
            try CanonicalJSON.encode(
                ServiceRateLimit(service: service, limit: RateLimit(perSecond: perSecond, burst: burst)))
        }
        for (body, words) in [
            (try limit("a", 0, 1), "a rate must be between"), (try limit("a", -1, 1), "a rate must be between"),
            (try limit("a", 1e300, 1), "a rate must be between"), (try limit("a", 10, 0), "a burst must be"),
            (try limit("a", 100_000, 10), "give a burst of at least 100"),
            (try limit("mmi.jobs.submit", 1, 1), "the broker's own"), (Array("{".utf8), "is not a limit"),
        ] {
            let answer = try #require(set(body))
            #expect(answer.status == .invalidPayload, "\(words)")
            #expect(
                RemoteErrorBody(decoding: answer.body).message.contains(words),
                "\(RemoteErrorBody(decoding: answer.body))")
        }
        #expect(broker.machine.limitListing().limits.isEmpty)
    }

    @Test func theJournalsLimitsApplyAtStartOverTheFlags() {
        var broker = Self.limited(RateLimit(perSecond: 1, burst: 1), journal: true)
        let form = try? CanonicalJSON.encode(RateLimit(perSecond: 50, burst: 5))
        var logged: [BrokerAction] = []
        broker.machine.limitsAtStart(
            [("sky.scan", form ?? []), ("other", Array("garbage".utf8))], now: broker.now, into: &logged)
        #expect(logged.count == 1, "the unreadable one is said")
        #expect(
            broker.machine.limitListing().limits.map { "\($0.service) \($0.limit.rateText) \($0.source)" } == [
                "sky.scan 50/s set"
            ])
        _ = broker.ready(worker1, capacity: 100)
        var sent = 0
        for index in 0..<10 {
            sent +=
                dispatched(broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60))).count
        }
        #expect(sent == 5)
    }

    /// A fast limit's tokens come every few microseconds, but the broker wakes for them at most
    /// every millisecond (its burst covers a millisecond's starts).
    @Test func theBrokerWakesForTokensAtMostEveryMillisecond() {
        var book = RateLimitBook()
        book.throttle(7, until: 1_000)
        #expect(book.takeDue(now: 1_000) == [7])
        book.throttle(7, until: 1_010)
        #expect(book.nextWake == 1_000 + RateLimit.wakeNanoseconds, "not 10 ns after the last")
        #expect(book.takeDue(now: 1_500).isEmpty == false, "due all the same when woken otherwise")
        #expect(book.nextWake == nil)
    }
}
