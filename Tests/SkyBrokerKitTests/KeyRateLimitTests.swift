import SkyJSON
import SkyJournal
import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Rate limits per key: each key of a service's work starts at most at the limit's rate after
/// its own burst; a key out of tokens gives up its turn, so another key's work never waits behind
/// it; calls and jobs of a key share its bucket; a key may come from the payload's field (work
/// without it refused); limits per key are set, listed, removed and kept like the others.
@Suite("Broker state machine: rate limits per key")
struct KeyRateLimitTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let admin = PeerID([0, 0, 0, 0, 2])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    /// A broker whose flag limits `sky.scan` per key.
    static func limited(_ limit: RateLimit, journal: Bool = false) -> BrokerHarness {
        BrokerHarness.withJournal {
            $0.journal = journal
            $0.keyRateLimits = ["sky.scan": limit]
        }
    }

    /// The keys of the calls `actions` sent to workers, in order (by the high half of their ids).
    static func keys(_ actions: [BrokerAction], _ names: [UInt64: String]) -> [String] {
        dispatched(actions).map { names[$0.1.high] ?? "?" }
    }

    @Test func eachKeyStartsAtItsOwnRateAndAKeyOutOfTokensNeverHoldsUpAnother() throws {
        var broker = Self.limited(RateLimit(perSecond: 10, burst: 2, key: KeyScope()))
        _ = broker.ready(worker1, capacity: 1000)
        let start = broker.now
        let names: [UInt64: String] = [1: "a", 2: "b", 3: "none"]
        var sent: [String] = []
        for index in 0..<30 {
            sent += Self.keys(
                broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60), key: "a"), names)
        }
        #expect(sent == ["a", "a"], "a's burst; its 28 others wait")
        // b comes after a's backlog: it starts at once, its own burst.
        for index in 0..<3 {
            sent += Self.keys(
                broker.request(client, RequestID(high: 2, low: UInt64(index)), timeout: .seconds(60), key: "b"), names)
        }
        #expect(sent == ["a", "a", "b", "b"], "b is not behind a")
        // Work without a key is the key "": a bucket of its own too.
        sent += Self.keys(broker.request(client, RequestID(high: 3, low: 0), timeout: .seconds(60)), names)
        #expect(sent.last == "none")
        let wake = try #require(broker.machine.nextRateWake)
        #expect(wake - start == .milliseconds(100), "woken for the next token of a key")
        let second = Self.keys(RateLimitTests.wakeUntil(start + .seconds(1), &broker), names)
        #expect(second.filter { $0 == "a" }.count == 10, "a: 10 a second after its burst")
        #expect(second.filter { $0 == "b" }.count == 1, "b: its last one")
        let listing = try #require(broker.machine.limitListing().limits.first)
        #expect(listing.limit.isPerKey && listing.source == "flag" && listing.started == 16)
        #expect(listing.keysWaiting == 1 && listing.throttled, "a waits for its next token")
        _ = RateLimitTests.wakeUntil(start + .seconds(3), &broker)
        #expect(broker.machine.nextRateWake == nil, "nothing waits: no wake-ups")
    }

    /// Calls without a key wait in plain order for the key ""'s token: no turns for them.
    @Test func callsWithoutAKeyWaitInOrderForTheKeyOfNoneWithoutTurns() throws {
        var broker = Self.limited(RateLimit(perSecond: 10, burst: 2, key: KeyScope()))
        _ = broker.ready(worker1, capacity: 100)
        let start = broker.now
        var sent: [RequestID] = []
        for index in 0..<6 {
            sent += dispatched(broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60)))
                .map(\.1)
        }
        #expect(sent.count == 2, "the key \"\"'s burst")
        let number = try #require(broker.machine.services.number(of: "sky.scan"))
        #expect(!broker.machine.queue.takesTurns(number), "no turns without keys")
        sent += dispatched(RateLimitTests.wakeUntil(start + .milliseconds(450), &broker)).map(\.1)
        #expect(sent == (0..<6).map { RequestID(high: 1, low: UInt64($0)) }, "in order, one every 100 ms")
        #expect(broker.machine.limitListing().limits.first?.started == 6)
    }

    /// Keys take turns as they do without a limit: a key that rested for a token comes back at
    /// its place, ahead of keys that had their turn meanwhile.
    @Test func aKeyThatRestedForATokenKeepsItsPlaceInTheTurns() {
        var broker = Self.limited(RateLimit(perSecond: 1, burst: 1, key: KeyScope()))
        _ = broker.ready(worker1, capacity: 1)
        let names: [UInt64: String] = [1: "a", 2: "b", 3: "c"]
        var order: [String] = []
        // The worker is busy: everything waits.
        let busy = RequestID(high: 9, low: 0)
        order += Self.keys(broker.request(client, busy, timeout: .seconds(60), key: "z"), names)
        for (high, key) in [(UInt64(1), "a"), (2, "b"), (3, "c")] {
            for low in 0..<2 {
                order += Self.keys(
                    broker.request(client, RequestID(high: high, low: UInt64(low)), timeout: .seconds(60), key: key),
                    names)
            }
        }
        var replied = broker.reply(worker1, client: client, busy)
        order += Self.keys(replied, names)
        while let (_, id) = dispatched(replied).first {
            replied = broker.reply(worker1, client: client, id)
            order += Self.keys(replied, names)
        }
        #expect(order == ["?", "a", "b", "c"], "one each; then each key's second waits for its token")
        let start = broker.now
        var later = RateLimitTests.wakeUntil(start + .seconds(1), &broker)
        order += Self.keys(later, names)
        while let (_, id) = dispatched(later).first {
            later = broker.reply(worker1, client: client, id)
            later += RateLimitTests.wakeUntil(broker.now + .milliseconds(10), &broker)
            order += Self.keys(later, names)
        }
        #expect(order == ["?", "a", "b", "c", "a", "b", "c"], "\(order)")
    }

    @Test func callsAndJobsOfAKeyShareItsBucket() {
        var broker = Self.limited(RateLimit(perSecond: 5, burst: 2, key: KeyScope()), journal: true)
        _ = broker.ready(worker1, capacity: 100)
        let start = broker.now
        var started: [RequestID] = []
        for index in 0..<4 {
            var submission = JobSubmission(service: "sky.scan", body: [7])
            submission.concurrencyKey = "k"
            let asked = broker.request(
                client, RequestID(high: 3, low: UInt64(index)), service: BrokerService.jobSubmit,
                body: submission.encode())
            started += broker.settle(asked)
        }
        #expect(started.count == 2, "k's burst")
        let call = RequestID(high: 4, low: 1)
        #expect(dispatched(broker.request(client, call, timeout: .seconds(60), key: "k")).isEmpty, "the call waits")
        let other = RequestID(high: 4, low: 2)
        #expect(dispatched(broker.request(client, other, timeout: .seconds(60), key: "j")).map(\.1) == [other])
        var later = RateLimitTests.wakeUntil(start + .milliseconds(600), &broker)
        later += broker.commit(later)
        #expect(dispatched(later).count == 3, "5 a second for k, calls and jobs together")
    }

    @Test func aCallThatWouldWaitPastItsDeadlineForItsKeyIsAnsweredAtOnce() throws {
        var broker = Self.limited(RateLimit(perSecond: 10, burst: 1, key: KeyScope()))
        _ = broker.ready(worker1, capacity: 100)
        for index in 0..<4 {
            _ = broker.request(client, RequestID(high: 1, low: UInt64(index)), timeout: .seconds(60), key: "a")
        }
        let late = RequestID(high: 2, low: 1)
        let answer = try #require(
            replies(broker.request(client, late, timeout: .milliseconds(300), key: "a"), to: late).first)
        #expect(answer.status == .overloaded)
        let body = RemoteErrorBody(decoding: answer.body)
        #expect(body.type == RemoteErrorBody.rateLimitedType && body.retryAfterMs == 400, "\(body)")
        #expect(body.message.contains("per key") && body.message.contains("3 calls of the key \"a\""), "\(body)")
        let otherKey = RequestID(high: 2, low: 2)
        #expect(
            dispatched(broker.request(client, otherKey, timeout: .milliseconds(300), key: "b")).map(\.1) == [otherKey],
            "another key is not refused")
        #expect(broker.machine.limitListing().limits.first?.refused == 1)
    }

    @Test func aKeyFieldGivesTheKeyAndAPayloadWithoutItIsRefusedSayingWhy() throws {
        var broker = Self.limited(RateLimit(perSecond: 1, burst: 1, key: KeyScope(field: "customer")), journal: true)
        _ = broker.ready(worker1, capacity: 100)
        func call(_ low: UInt64, _ body: String, key: String? = nil) -> [BrokerAction] {
            broker.request(
                client, RequestID(high: 1, low: low), body: Array(body.utf8), timeout: .seconds(60), key: key)
        }
        #expect(dispatched(call(1, #"{"customer":"acme","n":1}"#)).count == 1)
        #expect(dispatched(call(2, #"{"customer":"acme","n":2}"#)).isEmpty, "acme's token is spent")
        #expect(dispatched(call(3, #"{"customer":42}"#)).count == 1, "a number is a key too")
        #expect(dispatched(call(4, #"{"customer":"acme"}"#, key: "own")).count == 1, "a key of its own comes first")
        for (low, body, words) in [
            (UInt64(5), #"{"name":"x"}"#, "which this payload lacks"),
            (6, "not json", "is not a JSON object"),
            (7, #"{"customer":{"id":1}}"#, "is not a string, a number or a boolean"),
            (8, #"{"customer":""}"#, "a key is 1...255 bytes"),
            (9, #"{"customer":"a\u0007b"}"#, "without control characters"),
        ] {
            let answer = try #require(replies(call(low, body), to: RequestID(high: 1, low: low)).first)
            let error = RemoteErrorBody(decoding: answer.body)
            #expect(answer.status == .invalidPayload && error.type == RemoteErrorBody.keyMissingType)
            #expect(error.message.contains(words), "\(error)")
        }
        // A job's too, when it is submitted; a job with the field is kept under its key.
        let refused = RequestID(high: 2, low: 1)
        let job = broker.request(
            client, refused, service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: Array(#"{"n":1}"#.utf8)).encode())
        #expect(replies(job, to: refused).map(\.status) == [.invalidPayload])
        let kept = broker.request(
            client, RequestID(high: 2, low: 2), service: BrokerService.jobSubmit,
            body: JobSubmission(service: "sky.scan", body: Array(#"{"customer":"zed"}"#.utf8)).encode())
        let record = try #require(
            kept.lazy.compactMap { action -> JobRecord? in
                guard case .journal(.write(let changes, _)) = action else { return nil }
                return changes.lazy.compactMap { if case .submitted(let record) = $0 { record } else { nil } }.first
            }.first)
        #expect(try JobSubmission(decoding: record.options).concurrencyKey == "zed")
        #expect(broker.settle(kept).count == 1)
    }

    @Test func perKeyLimitsAreSetListedRemovedAndKeptInTheJournalBesideTheServicesOwn() throws {
        var broker = RateLimitTests.limited(RateLimit(perSecond: 100, burst: 100), journal: true)
        func control(_ service: String, _ body: [UInt8]) -> (actions: [BrokerAction], replies: [TaskReply]) {
            let id = RequestID(high: 0xAD, low: UInt64.random(in: 1...UInt64.max))
            let asked = broker.request(admin, id, service: service, body: body)
            return (asked, replies(asked + broker.commit(asked), to: id))
        }
        let perKey = RateLimit(perSecond: 2, burst: 1, key: KeyScope(field: "customer"))
        let set = control(
            BrokerService.limitSet, try CanonicalJSON.encode(ServiceRateLimit(service: "sky.scan", limit: perKey)))
        #expect(set.replies.map(\.body) == [[1]])
        let names = set.actions.flatMap { action -> [String] in
            guard case .journal(.write(let changes, _)) = action else { return [] }
            return changes.compactMap { if case .serviceLimited(let name, _) = $0 { name } else { nil } }
        }
        #expect(names == ["sky.scan\u{1F}key"], "a row of its own beside the service's")
        let listing = broker.machine.limitListing().limits
        #expect(
            listing.map { "\($0.limit.rateText) \($0.limit.isPerKey) \($0.source)" } == [
                "100/s false flag", "2/s true set",
            ])
        #expect(listing.last?.key?.field == "customer")
        // Both apply: the service's 100/s and each customer's 2/s.
        _ = broker.ready(worker1, capacity: 100)
        var sent = 0
        for index in 0..<3 {
            sent +=
                dispatched(
                    broker.request(
                        client, RequestID(high: 1, low: UInt64(index)), body: Array(#"{"customer":"a"}"#.utf8),
                        timeout: .seconds(60))
                ).count
        }
        #expect(sent == 1)
        // A second line other than `key` is refused; `key` removes the per-key limit only.
        let odd = control(BrokerService.limitRemove, Array("sky.scan\nkeys".utf8)).replies
        #expect(odd.map(\.status) == [.invalidPayload])
        let removed = control(BrokerService.limitRemove, Array("sky.scan\nkey".utf8))
        #expect(removed.replies.map(\.body) == [[1]])
        #expect(broker.machine.limitListing().limits.map(\.limit.isPerKey) == [false])
        // The waiting calls' key rested for a token: with the limit gone they start.
        #expect(dispatched(removed.actions).count == 2, "the resting key's calls go")
        // A restarted broker reads the row back as a per-key limit.
        var fresh = BrokerHarness.withJournal { $0.journal = true }
        var logged: [BrokerAction] = []
        fresh.machine.limitsAtStart(
            [
                ("sky.scan\u{1F}key", try CanonicalJSON.encode(perKey)),
                ("other\u{1F}key", try CanonicalJSON.encode(RateLimit(perSecond: 1, burst: 1))),
            ], now: fresh.now, into: &logged)
        #expect(logged.count == 1, "a row whose name and form disagree is said and left out")
        #expect(fresh.machine.limitListing().limits.map { "\($0.service) \($0.limit.isPerKey)" } == ["sky.scan true"])
    }

    /// A key's wake-up stays due after the work that waited for it went: the listing counts
    /// only keys whose work still waits.
    @Test func aKeyWhoseWaitingWorkWentIsNotListedAsWaiting() throws {
        var broker = Self.limited(RateLimit(perSecond: 1.0 / 3600, burst: 1, key: KeyScope()))
        _ = broker.ready(worker1, capacity: 100)
        let first = RequestID(high: 1, low: 1)
        let second = RequestID(high: 1, low: 2)
        #expect(dispatched(broker.request(client, first, timeout: .seconds(3600), key: "a")).count == 1)
        #expect(dispatched(broker.request(client, second, timeout: .seconds(3600), key: "a")).isEmpty)
        #expect(broker.machine.limitListing().limits.first?.keysWaiting == 1)
        _ = broker.cancel(client, second)
        let listing = try #require(broker.machine.limitListing().limits.first)
        #expect(listing.keysWaiting == 0 && !listing.throttled, "\(listing)")
    }

    /// Also the test of the key book's last lookup kept (`bucketIndex`): "a" is found, its
    /// bucket dropped with the rest, and found again, where a place kept from before would
    /// stop the process.
    @Test func theKeyBookDropsFullBucketsAndSharesOneBeyondItsBound() {
        var book = KeyRateBook()
        _ = book.set("s", RateLimit(perSecond: 1, burst: 1, key: KeyScope()))
        let (first, second, again) = (book.take("s", key: "a"), book.take("s", key: "b"), book.take("s", key: "a"))
        #expect(first && second)
        #expect(!again, "a spent its token")
        #expect(book.entry("s")?.buckets.count == 2)
        book.now = 2_000_000_000
        book.dropFullBuckets(now: book.now)
        #expect(book.entry("s")?.buckets.isEmpty == true, "full again: the same as none")
        let refilled = book.take("s", key: "a")
        #expect(refilled, "a has its token again")
        #expect(book.takeDue(now: book.now).map(\.key) == [], "a's wake found it awake already")
    }
}
