import SkyProtocol
import Testing

@testable import Sky

/// A call's deadline (`ScanOptions.deadline`) in the client's request table, on a hand-moved
/// clock: it ends the call whatever its attempts are doing, once, and drops it at the broker.
@Suite("Call deadlines")
struct CallDeadlineTests {
    typealias Action = RequestTable.Action

    static let noJitter = RequestTableTests.noJitter

    /// A call with `options`; `startedAt`: its caller started it before it reached the table.
    static func call(
        _ body: [UInt8] = [1], timeout: Duration? = .seconds(10), deadline: Duration?, startedAt: Duration? = nil,
        retry: RetryPolicy = noJitter
    ) -> RequestTable.Call {
        RequestTable.Call(
            service: "svc", body: body, options: ScanOptions(timeout: timeout, deadline: deadline, retry: retry),
            startedAt: startedAt)
    }

    static func failures(_ actions: [Action]) -> [(WaiterList, SkyError, Int)] {
        actions.compactMap {
            if case .fail(let waiters, let error, let attempts) = $0 { (waiters, error, attempts) } else { nil }
        }
    }

    /// Walks the table's timer from deadline to deadline up to `end`, as the client's I/O thread does.
    static func run(_ table: inout RequestTable, until end: Duration) -> [(Duration, Action)] {
        var seen: [(Duration, Action)] = []
        while let next = table.nextDeadline(), next <= end {
            seen += table.expire(now: next).map { (next, $0) }
        }
        return seen
    }

    /// Attempt 1 times out at 10 s, attempt 2 goes out after its backoff, and the 15 s deadline
    /// ends the call in the middle of it: one failure, naming the deadline and the attempt,
    /// and a CANCEL so that no worker goes on with it; no third attempt, and a late reply
    /// matches nothing.
    @Test func theDeadlineEndsTheCallInTheMiddleOfAnAttempt() {
        var table = RequestTableTests.connected()
        let id = try! #require(
            RequestTableTests.sent(table.start(Self.call(deadline: .seconds(15)), waiter: 1, now: .zero)).first
        ).requestID
        let seen = Self.run(&table, until: .seconds(60))
        let sends = seen.compactMap { entry -> (Duration, UInt32)? in
            if case .send(let request) = entry.1 { (entry.0, request.header.attempt) } else { nil }
        }
        #expect(sends.map(\.1) == [2], "one retry, after attempt 1's timeout and backoff")
        let failures = Self.failures(seen.map(\.1))
        #expect(failures.count == 1)
        let (waiters, error, attempts) = try! #require(failures.first)
        #expect(waiters == [1] && attempts == 2 && error.code == .timeout)
        #expect("\(error)".contains("the call's deadline of 15 s passed (attempt 2)"), "\(error)")
        let failedAt = try! #require(seen.first { if case .fail = $0.1 { true } else { false } }).0
        #expect(failedAt == .seconds(15), "on time, not at attempt 2's own timeout")
        #expect(
            seen.filter { $0.1 == .cancel(id) }.map(\.0) == [.seconds(10), .seconds(15)], "attempt 1's, then the call's"
        )
        #expect(table.callCount == 0 && table.waiterCount == 0 && table.nextDeadline() == nil)
        #expect(table.received(RequestTableTests.ok(id, attempt: 2), now: .seconds(16)) == [])
        #expect(table.counters.deadlinesPassed == 1 && table.counters.unmatchedReplies == 1)
    }

    /// A deadline shorter than the connect timeout, with no broker to reach: the failure names
    /// the missing connection and what the transport saw. It said only "the call's deadline of
    /// 3 s passed", which with "add workers" sent a newcomer with a wrong port to the workers.
    @Test func aDeadlinePassedWithoutAConnectionSaysSo() {
        var table = RequestTable(connectTimeout: .seconds(5), seed: 1)
        table.unreachableHint = "nothing listens at tcp://127.0.0.1:31999"
        _ = table.start(Self.call(deadline: .seconds(3)), waiter: 1, now: .zero)
        let failures = Self.failures(Self.run(&table, until: .seconds(10)).map(\.1))
        let (_, error, _) = try! #require(failures.first)
        #expect(failures.count == 1 && error.code == .timeout)
        #expect(
            "\(error)".contains(
                "the call's deadline of 3 s passed with no connection to the broker for 3 s (nothing listens at tcp://127.0.0.1:31999) (attempt 1)"
            ), "\(error)")
        #expect("\(error)".contains("Check that skybroker runs"), "\(error)")
    }

    /// The default options: a handler that never answers costs the caller 30 s and one attempt,
    /// not 90 s and three attempts on as many workers.
    @Test func byDefaultAHungCallEndsAfter30SecondsWithOneAttempt() {
        var table = RequestTableTests.connected()
        let options = ScanOptions.default
        let call = RequestTable.Call(service: "svc", body: [1], options: options)
        #expect(RequestTableTests.sent(table.start(call, waiter: 1, now: .zero)).count == 1)
        let seen = Self.run(&table, until: .seconds(600))
        #expect(RequestTableTests.sent(seen.map(\.1)).isEmpty, "no second attempt")
        let failure = try! #require(Self.failures(seen.map(\.1)).first)
        #expect(failure.1.code == .timeout && failure.2 == 1)
        #expect(seen.last?.0 == .seconds(30))
    }

    /// Coalesced callers keep their own deadlines: the first caller's passes while the later
    /// one's has time left, so the call goes on for it (no CANCEL) until its own passes.
    @Test func aCoalescedCallerKeepsItsOwnDeadline() {
        var table = RequestTableTests.connected()
        let first = Self.call(timeout: nil, deadline: .seconds(5))
        let id = try! #require(RequestTableTests.sent(table.start(first, waiter: 1, now: .zero)).first).requestID
        #expect(table.start(Self.call(timeout: nil, deadline: .seconds(5)), waiter: 2, now: .seconds(3)) == [])
        let atFive = table.expire(now: .seconds(5))
        #expect(Self.failures(atFive).map(\.0) == [[1]] && !atFive.contains(.cancel(id)), "\(atFive)")
        #expect(table.nextDeadline() == .seconds(8))
        let atEight = table.expire(now: .seconds(8))
        #expect(Self.failures(atEight).map(\.0) == [[2]] && atEight.contains(.cancel(id)), "\(atEight)")
        #expect(table.callCount == 0 && table.waiterCount == 0)
    }

    /// A caller that leaves takes its deadline with it: the other's call is not woken early.
    @Test func aCallerThatLeavesTakesItsDeadlineWithIt() {
        var table = RequestTableTests.connected()
        _ = table.start(Self.call(timeout: nil, deadline: .seconds(5)), waiter: 1, now: .zero)
        _ = table.start(Self.call(timeout: nil, deadline: .seconds(20)), waiter: 2, now: .seconds(1))
        #expect(table.abandon(1) == [])
        #expect(table.expire(now: .seconds(5)) == [])
        #expect(table.nextDeadline() == .seconds(21))
    }

    /// Its time went before it reached the table (asking the broker what it takes): it fails at
    /// once and nothing is sent. One that waited less keeps what is left.
    @Test func aDeadlineThatPassedBeforeTheCallReachedTheTableSendsNothing() {
        var table = RequestTableTests.connected()
        _ = table.start(Self.call([2], deadline: .seconds(3), startedAt: .seconds(1)), waiter: 2, now: .seconds(2))
        #expect(table.nextDeadline() == .seconds(4), "3 s from when its caller started it")
        let actions = table.start(Self.call(deadline: .seconds(1), startedAt: .zero), waiter: 1, now: .seconds(2))
        #expect(RequestTableTests.sent(actions).isEmpty)
        #expect(Self.failures(actions).map { $0.0 } == [[1]] && Self.failures(actions).first?.2 == 0)
        #expect(table.callCount == 1 && table.waiterCount == 1, "the other call only")
    }
}
