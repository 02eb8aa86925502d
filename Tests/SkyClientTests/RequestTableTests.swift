import SkyProtocol
import Testing

@testable import Sky

/// The client's request table, driven by hand: every instant is given, nothing waits.
@Suite("Request table")
struct RequestTableTests {
    typealias Action = RequestTable.Action

    static let noJitter = RetryPolicy(
        maxAttempts: 4, initialBackoff: .milliseconds(100), multiplier: 2, maxBackoff: .seconds(5), jitter: 0)

    static func call(
        _ body: [UInt8] = [1], timeout: Duration? = .seconds(1), retry: RetryPolicy = noJitter, coalesce: Bool = true
    ) -> RequestTable.Call {
        RequestTable.Call(
            service: "svc", body: body, options: ScanOptions(timeout: timeout, retry: retry, coalesce: coalesce))
    }

    /// A table whose connection is up at time zero.
    static func connected(endpoints: Int = 1) -> RequestTable {
        var table = RequestTable(connectTimeout: .seconds(5), endpointCount: endpoints, seed: 1)
        _ = table.connectionUp(now: .zero)
        return table
    }

    static func sent(_ actions: [Action]) -> [TaskRequest] {
        actions.compactMap { if case .send(let request) = $0 { request } else { nil } }
    }

    static func ok(_ id: RequestID, attempt: UInt32 = 1, _ body: [UInt8] = [9]) -> TaskReply {
        TaskReply(requestID: id, attempt: attempt, status: .ok, body: body)
    }

    @Test func aCallIsSentWithItsTimeoutAndAnsweredOnce() {
        var table = Self.connected()
        let actions = table.start(Self.call(), waiter: 1, now: .zero)
        let request = try! #require(Self.sent(actions).first)
        #expect(request.requestID == table.requestID(of: 1))
        #expect(request.header == RequestHeader(attempt: 1, timeoutMilliseconds: 1000))
        #expect(
            table.received(Self.ok(request.requestID), now: .milliseconds(5)) == [.succeed([1], body: [9], attempts: 1)]
        )
        #expect(table.received(Self.ok(request.requestID), now: .milliseconds(6)) == [], "a duplicate reply")
        #expect(table.counters.unmatchedReplies == 1)
        #expect(table.callCount == 0 && table.waiterCount == 0)
        #expect(table.nextDeadline() == nil)
    }

    /// The table starts with room for ``RequestTable/room`` calls and keeps it when they finish,
    /// so that a finished call's removal moves no neighbours back.
    @Test func theTableStartsWithRoomAndKeepsItWhenCallsFinish() {
        var table = Self.connected()
        #expect(table.roomForCalls >= RequestTable.room)
        var ids: [RequestID] = []
        for index in 0..<300 {
            let payload: [UInt8] = [UInt8(index % 256), UInt8(index / 256)]
            let actions = table.start(Self.call(payload), waiter: UInt64(index), now: .zero)
            ids.append(Self.sent(actions)[0].requestID)
        }
        #expect(Set(ids).count == 300)
        for id in ids { _ = table.received(Self.ok(id), now: .milliseconds(1)) }
        #expect(table.callCount == 0 && table.waiterCount == 0)
        #expect(table.roomForCalls >= RequestTable.room)
    }

    /// A call's id carries its slot, and a finished call's slot goes to the next call: a late
    /// reply for the finished call, or one naming a slot the table never had, matches nothing.
    @Test func aReplyForAFinishedCallDoesNotReachTheNextCallInItsSlot() {
        var table = Self.connected()
        let first = Self.sent(table.start(Self.call([1]), waiter: 1, now: .zero))[0].requestID
        #expect(table.received(Self.ok(first), now: .milliseconds(1)).count == 1)
        let second = Self.sent(table.start(Self.call([2]), waiter: 2, now: .milliseconds(2)))[0].requestID
        #expect(second.low & 0xffff_ffff == first.low & 0xffff_ffff, "the freed slot is taken again")
        #expect(second != first)
        #expect(table.received(Self.ok(first), now: .milliseconds(3)) == [], "a late reply")
        let beyond = RequestID(high: second.high, low: second.low | 0xffff_ffff)
        #expect(table.received(Self.ok(beyond), now: .milliseconds(3)) == [], "a slot the table never had")
        #expect(table.counters.unmatchedReplies == 2 && table.callCount == 1)
        #expect(table.received(Self.ok(second), now: .milliseconds(4)) == [.succeed([2], body: [9], attempts: 1)])
    }

    @Test func timeoutsRetryOnTheBackoffScheduleWithTheSameIDAndARaisedAttempt() {
        var table = Self.connected()
        var sends = Self.sent(table.start(Self.call(), waiter: 1, now: .zero)).map { ($0, Duration.zero) }
        let id = sends[0].0.requestID
        var finished: [Action] = []
        // Walk time from deadline to deadline, as the client's timer does.
        while let next = table.nextDeadline() {
            let actions = table.expire(now: next)
            sends += Self.sent(actions).map { ($0, next) }
            finished += actions.filter { if case .fail = $0 { true } else { false } }
            #expect(actions.contains(.cancel(id)) || !Self.sent(actions).isEmpty)
        }
        #expect(sends.map(\.0.requestID) == Array(repeating: id, count: 4))
        #expect(sends.map(\.0.header.attempt) == [1, 2, 3, 4])
        // Each attempt waits 1 s, then backs off 100, 200, 400 ms.
        #expect(sends.map(\.1) == [0, 1100, 2300, 3700].map { Duration.milliseconds($0) })
        guard case .fail(let waiters, let error, let attempts) = try! #require(finished.first) else { return }
        #expect(waiters == [1] && attempts == 4 && error.code == .timeout)
        #expect(table.counters.attemptTimeouts == 4 && table.counters.retries == 3)
    }

    @Test func aFailureForAnEarlierAttemptIsStaleButItsSuccessCounts() {
        var table = Self.connected()
        _ = table.start(Self.call(), waiter: 1, now: .zero)
        let id = try! #require(table.requestID(of: 1))
        _ = table.expire(now: .seconds(1))  // attempt 1 timed out
        #expect(
            table.received(.failure(id, .deadlineExceeded, type: "t", message: "m"), now: .milliseconds(1050))
                == [], "answers the attempt given up on")
        #expect(
            table.received(
                .failure(id, .cancelled, type: "t", message: "m", attempt: 0), now: .milliseconds(1060))
                == [], "the broker's answer to the client's CANCEL")
        #expect(table.counters.staleReplies == 2)
        #expect(Self.sent(table.expire(now: .milliseconds(1100))).map(\.header.attempt) == [2])
        // The first attempt's work finished after all: the call is done, attempt 2 is cancelled.
        #expect(
            table.received(Self.ok(id, attempt: 1), now: .milliseconds(1200))
                == [.cancel(id), .succeed([1], body: [9], attempts: 2)])
    }

    @Test func aFailureThatIsNotRetriedEndsTheCallAtOnce() {
        var table = Self.connected()
        _ = table.start(Self.call(), waiter: 1, now: .zero)
        let actions = table.received(
            .failure(table.requestID(of: 1)!, .handlerError, type: "E", message: "bad input"), now: .milliseconds(3))
        #expect(actions == [.fail([1], .remote(type: "E", message: "bad input"), attempts: 1)])
    }

    @Test func callsMadeBeforeTheConnectionAreSentInOrderWhenItComesUp() {
        var table = RequestTable(connectTimeout: .seconds(5), seed: 1)
        #expect(table.start(Self.call([1]), waiter: 2, now: .zero).isEmpty)
        #expect(table.start(Self.call([2]), waiter: 1, now: .milliseconds(1)).isEmpty)
        let sends = Self.sent(table.connectionUp(now: .milliseconds(300)))
        #expect(sends.map(\.requestID) == [table.requestID(of: 2), table.requestID(of: 1)])
        #expect(sends.map(\.body) == [[1], [2]])
        #expect(sends.map(\.header.attempt) == [1, 1])
    }

    @Test func aLostConnectionResendsWhatWasOutWithARaisedAttemptThatIsNotARetry() {
        var table = Self.connected()
        _ = table.start(Self.call(), waiter: 1, now: .zero)
        let id = try! #require(table.requestID(of: 1))
        table.connectionDown(now: .milliseconds(100))
        let resent = Self.sent(table.connectionUp(now: .milliseconds(800)))
        #expect(resent.map(\.header.attempt) == [2])
        #expect(table.counters.resentAfterReconnect == 1 && table.counters.retries == 0)
        #expect(
            table.received(Self.ok(id, attempt: 2), now: .milliseconds(900))
                == [.succeed([1], body: [9], attempts: 1)])
    }

    @Test func waitingLongerThanTheConnectTimeoutIsBrokerUnreachable() {
        var table = RequestTable(connectTimeout: .seconds(2), seed: 1)
        let call = Self.call(timeout: .seconds(30), retry: .never)
        _ = table.start(call, waiter: 1, now: .zero)
        #expect(table.nextDeadline() == .seconds(2))
        guard case .fail(_, let error, _) = try! #require(table.expire(now: .seconds(2)).first) else { return }
        #expect(error.code == .brokerUnreachable)
        #expect(error.description.contains("no connection to the broker for 2 s"))
    }

    @Test func equalCallsShareOneExecution() {
        var table = Self.connected()
        #expect(Self.sent(table.start(Self.call([7]), waiter: 1, now: .zero)).count == 1)
        #expect(table.start(Self.call([7]), waiter: 2, now: .zero).isEmpty)
        #expect(table.requestID(of: 2) == table.requestID(of: 1))
        #expect(Self.sent(table.start(Self.call([8]), waiter: 3, now: .zero)).count == 1)
        #expect(table.counters.coalesced == 1 && table.callCount == 2 && table.waiterCount == 3)
        #expect(
            table.received(Self.ok(table.requestID(of: 1)!), now: .milliseconds(1))
                == [.succeed([1, 2], body: [9], attempts: 1)])
        // Once finished, an equal call runs again.
        #expect(Self.sent(table.start(Self.call([7]), waiter: 4, now: .milliseconds(2))).count == 1)
    }

    @Test func optingOutOfCoalescingRunsEveryCall() {
        var table = Self.connected()
        _ = table.start(Self.call([7], coalesce: false), waiter: 1, now: .zero)
        #expect(Self.sent(table.start(Self.call([7], coalesce: false), waiter: 2, now: .zero)).count == 1)
        #expect(table.counters.coalesced == 0)
    }

    @Test func theBrokerIsToldOnlyWhenTheLastWaiterLeaves() {
        var table = Self.connected()
        _ = table.start(Self.call([7]), waiter: 1, now: .zero)
        _ = table.start(Self.call([7]), waiter: 2, now: .zero)
        let id = try! #require(table.requestID(of: 1))
        #expect(table.abandon(1) == [])
        #expect(table.waiterCount == 1 && table.callCount == 1)
        #expect(table.abandon(2) == [.cancel(id)])
        #expect(table.callCount == 0 && table.waiterCount == 0)
        #expect(table.abandon(2) == [], "abandoning twice is harmless")
        #expect(table.received(Self.ok(id), now: .milliseconds(1)) == [])
    }

    @Test func aSilentEndpointIsLeftForTheNextAfterTheConnectTimeout() {
        var table = RequestTable(connectTimeout: .seconds(2), endpointCount: 3, seed: 1)
        #expect(table.nextDeadline() == .seconds(2))
        #expect(table.expire(now: .seconds(2)) == [.switchEndpoint(1)])
        #expect(table.expire(now: .seconds(4)) == [.switchEndpoint(2)])
        #expect(table.expire(now: .seconds(6)) == [.switchEndpoint(0)])
        _ = table.connectionUp(now: .milliseconds(6500))
        #expect(table.nextDeadline() == nil)
    }

    /// An active broker and a standby: a lost connection leaves the endpoint at once (the broker
    /// was killed or stepped down, and another may be taking over).
    @Test func aLostConnectionLeavesTheEndpointAtOnceWhenThereAreSeveral() {
        var table = RequestTable(connectTimeout: .seconds(5), endpointCount: 2, seed: 1)
        _ = table.connectionUp(now: .seconds(1))
        table.connectionDown(now: .seconds(3))
        #expect(table.nextDeadline() == .seconds(3))
        #expect(table.expire(now: .seconds(3)) == [.switchEndpoint(1)])
        var single = RequestTable(connectTimeout: .seconds(5), seed: 1)
        _ = single.connectionUp(now: .seconds(1))
        single.connectionDown(now: .seconds(3))
        #expect(single.nextDeadline() == nil, "one endpoint: libzmq reconnects to it")
    }

    /// A standby binds nothing: an endpoint that refuses is left after a short dwell, not after
    /// the connect timeout, and a refusal while connected changes nothing.
    @Test func aRefusingEndpointIsLeftAfterAShortDwell() {
        let dwell = RequestTable.refusedEndpointDwell
        var table = RequestTable(connectTimeout: .seconds(5), endpointCount: 2, seed: 1)
        table.endpointRefused(now: dwell / 10)
        #expect(table.nextDeadline() == dwell)
        #expect(table.expire(now: dwell) == [.switchEndpoint(1)])
        table.endpointRefused(now: dwell + dwell / 10)
        #expect(table.nextDeadline() == dwell * 2)
        _ = table.connectionUp(now: dwell * 3)
        table.endpointRefused(now: dwell * 4)
        #expect(table.nextDeadline() == nil)
    }

    @Test func timersOfFinishedCallsDoNotPileUp() {
        var table = Self.connected()
        for number in 0..<20_000 {
            let sent = Self.sent(
                table.start(Self.call(timeout: .seconds(30), coalesce: false), waiter: UInt64(number), now: .zero))
            _ = table.received(Self.ok(sent[0].requestID), now: .zero)
        }
        #expect(table.callCount == 0)
        #expect(table.timerCount <= 1025, "\(table.timerCount) timers for no call in flight")
    }

    @Test func closingFailsEveryWaiter() {
        var table = Self.connected()
        _ = table.start(Self.call([7]), waiter: 1, now: .zero)
        _ = table.start(Self.call([7]), waiter: 2, now: .zero)
        #expect(table.closeAll() == [.fail([1, 2], .clientClosed, attempts: 1)])
    }

    /// The trace frame goes only to a broker known to take it, and that is known per
    /// connection: a resend after a reconnect (perhaps to an older broker) goes without it
    /// until the broker is asked again.
    @Test func theTraceFrameIsSentOnlyWhileTheBrokerOfThisConnectionTakesIt() {
        var table = Self.connected()
        var call = Self.call(timeout: .seconds(10), coalesce: false)
        call.trace = [1, 2, 3]
        #expect(Self.sent(table.start(call, waiter: 1, now: .zero)).first?.trace == nil, "not asked yet")
        table.brokerTakesTrace(epoch: table.connectionEpoch)
        #expect(Self.sent(table.start(call, waiter: 2, now: .zero)).first?.trace == [1, 2, 3])
        let epoch = table.connectionEpoch
        table.connectionDown(now: .milliseconds(5))
        #expect(table.connectionEpoch == epoch + 1)
        let resent = Self.sent(table.connectionUp(now: .milliseconds(6)))
        #expect(resent.count == 2 && resent.allSatisfy { $0.trace == nil }, "a new connection: not known yet")
        table.brokerTakesTrace(epoch: epoch)
        #expect(
            Self.sent(table.start(call, waiter: 3, now: .milliseconds(7))).first?.trace
                == nil, "an answer from the old connection does not count")
    }

    /// A kept call (``ScanOptions/keepIfAbandoned``) whose deadline passes is left, not dropped:
    /// the broker is told (CANCEL), and its answer ends the call with the job's id; without an
    /// answer the caller hears a timeout that names the job it may be.
    @Test func aKeptCallsCallerLeavesItAtItsDeadlineAndHearsTheJobsID() throws {
        var table = Self.connected()
        let options = ScanOptions(timeout: .seconds(1), deadline: .seconds(1), retry: .never, keepIfAbandoned: true)
        let request = try #require(
            Self.sent(
                table.start(RequestTable.Call(service: "svc", body: [1], options: options), waiter: 1, now: .zero)
            )
            .first)
        #expect(request.header.keepIfAbandoned)
        let left = table.expire(now: .seconds(1))
        #expect(left == [.cancel(request.requestID)], "no failure yet: the broker answers")
        let answer = TaskReply.failure(request.requestID, .keptAsJob, type: "keptAsJob", message: "kept", attempt: 0)
        #expect(
            table.received(answer, now: .milliseconds(1003))
                == [.fail([1], .keptAsJob(JobID(request.requestID)), attempts: 1)])
        #expect(table.callCount == 0)

        // No answer within the confirmation bound: a timeout naming the job it may be.
        let second = try #require(
            Self.sent(
                table.start(RequestTable.Call(service: "svc", body: [2], options: options), waiter: 2, now: .zero)
            )
            .first)
        #expect(table.expire(now: .seconds(1)) == [.cancel(second.requestID)])
        let late = table.expire(now: .seconds(1) + RequestTable.keepConfirmation)
        guard case .fail(_, .timeout(let message), _)? = late.first else {
            Issue.record("\(late)")
            return
        }
        #expect(message.contains("\(JobID(second.requestID))"))
    }

    /// A kept call whose caller chose its id (``SkyClient/scan(_:keptAs:options:coder:)``) goes out
    /// under that id, which carries no slot: its replies and its timer still find it, a second
    /// call with the id while it is in flight is refused, and once it ended the id matches nothing.
    @Test func aCallWhoseCallerChoseItsIDIsFoundByThatID() throws {
        var table = Self.connected()
        let plainOptions = ScanOptions(timeout: .seconds(5), deadline: .seconds(5), retry: .never)
        let plain = try #require(
            Self.sent(
                table.start(RequestTable.Call(service: "svc", body: [1], options: plainOptions), waiter: 1, now: .zero)
            ).first)
        var options = ScanOptions(timeout: .seconds(1), deadline: .seconds(1), retry: .never, keepIfAbandoned: true)
        // Its low 32 bits name the slot the first call holds.
        let chosen = JobID(RequestID(high: 0xfeed, low: plain.requestID.low & 0xffff_ffff))
        options.keptAs = chosen
        let kept = try #require(
            Self.sent(
                table.start(RequestTable.Call(service: "svc", body: [2], options: options), waiter: 2, now: .zero)
            )
            .first)
        #expect(kept.requestID == chosen.requestID && kept.header.keepIfAbandoned)
        let twice = table.start(RequestTable.Call(service: "svc", body: [3], options: options), waiter: 3, now: .zero)
        guard case .fail(let refused, .invalidTask(let message), attempts: 0)? = twice.first else {
            Issue.record("\(twice)")
            return
        }
        #expect(refused == [3] && message.contains("\(chosen)"))

        // Its deadline: the broker is told under the chosen id.
        #expect(table.expire(now: .seconds(1)) == [.cancel(chosen.requestID)])
        let answer = TaskReply.failure(chosen.requestID, .keptAsJob, type: "keptAsJob", message: "kept", attempt: 0)
        #expect(table.received(answer, now: .milliseconds(1002)) == [.fail([2], .keptAsJob(chosen), attempts: 1)])
        #expect(table.callCount == 1, "the first call is still the broker's to answer")
        _ = table.received(Self.ok(chosen.requestID), now: .milliseconds(1003))
        #expect(table.counters.unmatchedReplies == 1)
    }

    /// The broker is told how long the caller waits: what is left of the attempt's timeout, or
    /// of the caller's deadline when that comes first (so that a wait it cannot meet, a rate
    /// limit's, is answered at once); a call held for a connection is sent with what is left.
    @Test func anAttemptCarriesTheTimeItsCallerStillWaits() throws {
        var table = Self.connected()
        func sentTimeout(_ timeout: Duration, deadline: Duration, waiter: RequestTable.WaiterID) -> UInt32? {
            let call = RequestTable.Call(
                service: "svc", body: [UInt8(waiter)], options: ScanOptions(timeout: timeout, deadline: deadline))
            return Self.sent(table.start(call, waiter: waiter, now: .zero)).first?.header.timeoutMilliseconds
        }
        #expect(sentTimeout(.seconds(30), deadline: .seconds(1), waiter: 1) == 1000)
        #expect(sentTimeout(.seconds(2), deadline: .seconds(30), waiter: 2) == 2000)

        var held = RequestTable(connectTimeout: .seconds(5), seed: 1)
        _ = held.start(
            RequestTable.Call(
                service: "svc", body: [3], options: ScanOptions(timeout: .seconds(30), deadline: .seconds(1))),
            waiter: 3, now: .zero)
        let sent = try #require(Self.sent(held.connectionUp(now: .milliseconds(400))).first)
        #expect(sent.header.timeoutMilliseconds == 600)
    }
}
