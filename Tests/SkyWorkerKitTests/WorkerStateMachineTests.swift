import Logging
import SkyProtocol
import SkyWire
import SkyZMQ
import Testing

@testable import SkyWorkerKit

/// The worker's state machine driven like the broker's: one line per input and the actions it
/// must return (logs left out), time moved by hand, no sockets, no tasks, no sleeps.
@Suite("Worker state machine: registration, tasks, cancellation, liveness, drain")
struct WorkerStateMachineTests {
    typealias Action = WorkerStateMachine.Action
    typealias Key = WorkerStateMachine.TaskKey

    typealias Worker = WorkerHarness

    static func request(_ n: UInt64) -> TaskRequest {
        TaskRequest(requestID: RequestID(high: 0, low: n), service: "echo", body: [UInt8(n)])
    }

    static func key(_ n: UInt64) -> Key { Key(tag: [0, UInt8(n)], requestID: RequestID(high: 0, low: n)) }

    static func deliver(_ n: UInt64) -> BrokerToWorker { .request(tag: key(n).tag, request(n)) }

    static func ok(_ n: UInt64) -> TaskReply {
        TaskReply(requestID: RequestID(high: 0, low: n), status: .ok, body: [1])
    }

    @Test func startConnectsOnceAndTheTaskRunsAndItsReplyGoesBack() {
        var worker = Worker()
        #expect(worker.start() == [.connect(generation: 1)])
        #expect(worker.start() == [])
        #expect(worker.receive(Self.deliver(1)) == [.startTask(Self.key(1), Self.request(1), slot: 0)])
        #expect(worker.machine.running.count == 1)
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [.send(.reply(tag: Self.key(1).tag, Self.ok(1)))])
        #expect(worker.machine.running.isEmpty)
        // A second report of the same task (it cannot happen, but) sends nothing.
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [])
    }

    /// Each running task has a slot no other running task has, below the capacity; a finished
    /// task's slot goes to the next task; a new connection starts from slot 0 again.
    @Test func runningTasksHaveDistinctSlotsBelowTheCapacityAndFreedOnesAreReused() {
        var worker = Worker(capacity: 3)
        _ = worker.start()
        #expect(worker.receive(Self.deliver(1)) == [.startTask(Self.key(1), Self.request(1), slot: 0)])
        #expect(worker.receive(Self.deliver(2)) == [.startTask(Self.key(2), Self.request(2), slot: 1)])
        #expect(worker.receive(Self.deliver(1)) == [], "a second delivery takes no slot")
        #expect(worker.receive(Self.deliver(3)) == [.startTask(Self.key(3), Self.request(3), slot: 2)])
        #expect(worker.machine.running.all == [Self.key(1): 0, Self.key(2): 1, Self.key(3): 2])
        _ = worker.finished(Self.key(2), Self.ok(2))
        #expect(worker.receive(Self.deliver(4)) == [.startTask(Self.key(4), Self.request(4), slot: 1)])
        #expect(
            worker.receive(.cancel(tag: Self.key(4).tag, Self.key(4).requestID)) == [.cancelTask(Self.key(4), slot: 1)])
        #expect(
            worker.receive(.disconnect) == [
                .cancelTask(Self.key(1), slot: 0), .cancelTask(Self.key(3), slot: 2), .cancelTask(Self.key(4), slot: 1),
                .connect(generation: 2),
            ])
        #expect(worker.receive(Self.deliver(5)) == [.startTask(Self.key(5), Self.request(5), slot: 0)])
        // The table of running tasks keeps room for four times the capacity across the
        // reconnect (so a removal moves no neighbours back).
        #expect(worker.machine.running.capacity >= 12)
    }

    /// The running table's room has a ceiling: a worker announcing the protocol's largest
    /// capacity does not reserve a table for four times it up front.
    @Test func theRunningTableStartsWithRoomForFourTimesTheCapacityUpToALimit() {
        #expect(Worker(capacity: 3).machine.running.capacity >= 12)
        let large = Worker(capacity: WorkerToBroker.maxCapacity).machine.running.capacity
        #expect(large >= WorkerStateMachine.runningRoomLimit && large < 2 * WorkerStateMachine.runningRoomLimit)
    }

    @Test func aSecondDeliveryOfARunningTaskIsNotRunTwice() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(worker.receive(Self.deliver(1)) == [])
        #expect(worker.machine.running.count == 1)
    }

    /// At the capacity too: a second delivery of a running task is dropped, not answered.
    @Test func aSecondDeliveryAtTheCapacityIsDroppedNotAnsweredOverloaded() {
        var worker = Worker(capacity: 1)
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(worker.receive(Self.deliver(1)) == [])
        #expect(worker.machine.running.count == 1 && worker.machine.refusedOverCapacity == 0)
    }

    @Test func aTaskBeyondTheCapacityIsAnsweredOverloadedNotRun() throws {
        var worker = Worker(capacity: 1)
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        let actions = worker.receive(Self.deliver(2))
        guard case .send(.reply(let tag, let reply)) = try #require(actions.first), actions.count == 1 else {
            Issue.record("expected one overloaded reply, got \(actions)")
            return
        }
        #expect(tag == Self.key(2).tag)
        #expect(reply.status == .overloaded)
        #expect(RemoteErrorBody(decoding: reply.body).type == "overloaded")
        #expect(worker.machine.refusedOverCapacity == 1)
    }

    /// docs/protocol.md: the worker cancels the handler and still sends a REPLY, which returns
    /// the credit a client's CANCEL keeps taken.
    @Test func aCancelReachesTheRunningTaskAndItsReplyStillReturnsTheCredit() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(
            worker.receive(.cancel(tag: Self.key(1).tag, Self.key(1).requestID)) == [.cancelTask(Self.key(1), slot: 0)])
        let cancelled = TaskReply.failure(Self.key(1).requestID, .cancelled, message: "the task was cancelled")
        #expect(worker.finished(Self.key(1), cancelled) == [.send(.reply(tag: Self.key(1).tag, cancelled))])
        // A cancel for a task that is not here (finished already) does nothing.
        #expect(worker.receive(.cancel(tag: Self.key(9).tag, Self.key(9).requestID)) == [])
    }

    /// A handler's progress goes to a broker whose FEATURES named it, for a task that runs;
    /// to a broker that did not, and for a task that ended, nothing is sent. A new connection
    /// forgets what the last broker said.
    @Test func progressGoesOnlyToABrokerThatTakesItAndOnlyForARunningTask() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        let report = ProgressReport(fraction: 0.5, message: "halfway", lines: ["a"])
        #expect(worker.progress(Self.key(1), report) == [], "the broker did not say it takes progress")
        _ = worker.receive(.features(["edition=2", "progress"]))
        #expect(worker.machine.brokerTakesProgress)
        #expect(
            worker.progress(Self.key(1), report) == [
                .send(.progress(tag: Self.key(1).tag, Self.key(1).requestID, report))
            ])
        #expect(worker.progress(Self.key(2), report) == [], "no such task")
        _ = worker.finished(Self.key(1), Self.ok(1))
        #expect(worker.progress(Self.key(1), report) == [], "the task ended")
        _ = worker.receive(.disconnect)
        #expect(!worker.machine.brokerTakesProgress, "a new connection: the next broker says again")
    }

    @Test func aBrokerThatForgotTheWorkerGetsANewRegistrationAndOldTasksAreCancelled() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(worker.receive(.disconnect) == [.cancelTask(Self.key(1), slot: 0), .connect(generation: 2)])
        // Messages still arriving on the old connection are not inputs any more.
        #expect(worker.receive(Self.deliver(2), generation: 1) == [])
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [])
        #expect(worker.receive(Self.deliver(3)) == [.startTask(Self.key(3), Self.request(3), slot: 0)])
    }

    /// A broker that restarted hands out its tags anew: the task it runs again may come on the
    /// next connection under the tag it had on the last. The handler of the last connection's
    /// delivery, cancelled on the reconnect, ends late: its reply is not sent (the broker would
    /// take it for the new delivery's outcome: jobs ended `cancelled` that nobody cancelled).
    @Test func aLateReplyFromTheLastConnectionDoesNotAnswerTheSameTaskOnThisOne() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        _ = worker.receive(.disconnect)
        #expect(worker.receive(Self.deliver(1)) == [.startTask(Self.key(1), Self.request(1), slot: 0)])
        let cancelled = TaskReply.failure(RequestID(high: 0, low: 1), .cancelled, message: "the task was cancelled")
        #expect(worker.finished(Self.key(1), cancelled, connection: 1) == [], "the old delivery's late reply")
        #expect(
            worker.finished(Self.key(1), Self.ok(1)) == [.send(.reply(tag: Self.key(1).tag, Self.ok(1)))])
    }

    /// A result larger than the broker takes would close the connection (and lose every task on
    /// it, then run again elsewhere and do the same): the worker answers that task with a failure
    /// that names both sizes instead, and sends results within the limit as they are.
    @Test func aResultOverTheBrokersFrameLimitIsAnsweredWithAFailureInstead() throws {
        var worker = Worker()
        _ = worker.start()
        // Before the broker says, nothing is checked (a broker that predates FEATURES).
        _ = worker.receive(Self.deliver(1))
        let big = TaskReply(
            requestID: RequestID(high: 0, low: 1), status: .ok, body: [UInt8](repeating: 1, count: 5000))
        #expect(worker.finished(Self.key(1), big) == [.send(.reply(tag: Self.key(1).tag, big))])

        #expect(worker.receive(.features(["max-frame-size=4096", "something-later"])) == [])
        #expect(worker.machine.resultLimit == 4096)
        _ = worker.receive(Self.deliver(2))
        _ = worker.receive(Self.deliver(3))
        let tooBig = TaskReply(
            requestID: RequestID(high: 0, low: 2), status: .ok, body: [UInt8](repeating: 1, count: 4097))
        let sent = worker.finished(Self.key(2), tooBig)
        guard case .send(.reply(let tag, let reply))? = sent.first, sent.count == 1 else {
            Issue.record("expected one reply, got \(sent)")
            return
        }
        #expect(tag == Self.key(2).tag)
        #expect(reply.status == .handlerError && reply.requestID == tooBig.requestID)
        let error = RemoteErrorBody(decoding: reply.body)
        #expect(error.type == RemoteErrorBody.resultTooLargeType)
        #expect(error.message.contains("4097 bytes") && error.message.contains("at most 4096"))
        #expect(worker.machine.resultsTooLarge == 1)
        // At the limit: sent as it is.
        let fits = TaskReply(
            requestID: RequestID(high: 0, low: 3), status: .ok, body: [UInt8](repeating: 1, count: 4096))
        #expect(worker.finished(Self.key(3), fits) == [.send(.reply(tag: Self.key(3).tag, fits))])

        // A new connection may reach another broker: no limit until it says.
        _ = worker.receive(.disconnect)
        #expect(worker.machine.resultLimit == nil)
    }

    /// docs/protocol.md, "Packed messages": a broker that names `packed` gets the worker's
    /// FEATURES asking for packed REQUESTs (once, and naming the trace feature too when the
    /// worker takes traces), and packed REPLYs from then on, whatever form a REQUEST came in; a
    /// new connection replies framed until its broker names `packed` again.
    @Test(arguments: [false, true])
    func aBrokerThatTakesPackedMessagesGetsPackedReplies(takesTrace: Bool) {
        var worker = Worker(takesTrace: takesTrace)
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        let names = takesTrace ? ["edition=2", "packed", "trace-context"] : ["edition=2", "packed"]
        #expect(worker.receive(.features(["max-frame-size=4096", "packed"])) == [.send(.features(names))])
        #expect(worker.machine.brokerTakesPacked && worker.machine.resultLimit == 4096)
        // Said once: the same FEATURES again asks for nothing more.
        #expect(worker.receive(.features(["max-frame-size=4096", "packed"])) == [])
        // The task that came framed before is answered packed; a packed delivery runs as any other.
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [.send(.packedReply(tag: Self.key(1).tag, Self.ok(1)))])
        #expect(
            worker.receive(.packedRequest(tag: Self.key(2).tag, Self.request(2)))
                == [.startTask(Self.key(2), Self.request(2), slot: 0)])
        #expect(worker.finished(Self.key(2), Self.ok(2)) == [.send(.packedReply(tag: Self.key(2).tag, Self.ok(2)))])
        // A refusal over capacity goes packed too.
        _ = worker.receive(Self.deliver(3))
        _ = worker.receive(Self.deliver(4))
        let refused = worker.receive(Self.deliver(5))
        guard case .send(.packedReply(let tag, let reply))? = refused.first else {
            Issue.record("expected a packed overloaded reply, got \(refused)")
            return
        }
        #expect(tag == Self.key(5).tag && reply.status == .overloaded)
        // Another connection may reach another broker: framed until it says.
        _ = worker.receive(.disconnect)
        #expect(!worker.machine.brokerTakesPacked)
        _ = worker.receive(Self.deliver(6))
        #expect(worker.finished(Self.key(6), Self.ok(6)) == [.send(.reply(tag: Self.key(6).tag, Self.ok(6)))])
    }

    /// The broker says its heartbeat interval in FEATURES: the worker heartbeats as often and
    /// judges the broker's silence by it. A worker at 10 s under a broker at 1 s was declared
    /// dead between two heartbeats, over and over, and blamed an inline handler.
    @Test func theWorkerAdoptsTheHeartbeatIntervalTheBrokerSays() {
        var worker = Worker()  // 1 s × 3
        _ = worker.start()
        #expect(worker.receive(.features(["edition=2", "heartbeat-ms=10000"])) == [.heartbeatEvery(.seconds(10))])
        #expect(worker.receive(.features(["edition=2", "heartbeat-ms=10000"])) == [], "said once")
        // Silence is judged by the broker's 10 s × 3.
        #expect(worker.advance(.seconds(30) - .nanoseconds(1)) == [])
        #expect(worker.advance(.nanoseconds(1)) == [])  // lost: wait 1 s on the old connection
        #expect(worker.advance(.seconds(1)) == [.connect(generation: 2)])
        // The same interval as the worker's: nothing to change.
        var same = Worker()
        _ = same.start()
        #expect(same.receive(.features(["heartbeat-ms=1000"])) == [])
    }

    @Test func silenceLosesTheBrokerAndTheWorkerReconnectsAfterTheBackoff() {
        var worker = Worker()
        _ = worker.start()
        #expect(worker.advance(.seconds(3) - .nanoseconds(1)) == [])
        #expect(worker.advance(.nanoseconds(1)) == [])  // lost: wait 1 s on the old connection
        #expect(worker.advance(.seconds(1) - .nanoseconds(1)) == [])
        #expect(worker.advance(.nanoseconds(1)) == [.connect(generation: 2)])
        // A broker that speaks again in time keeps the connection.
        _ = worker.advance(.seconds(2))
        _ = worker.receive(.heartbeat)
        #expect(worker.advance(.seconds(2)) == [])
    }

    /// The log line of a lost broker names what the transport saw of the endpoint (nothing
    /// accepting there, or TCP without ZeroMQ); it said only "no word from the broker".
    @Test(
        arguments: [
            ([ZMQMonitorEvent.Kind.connectRetried], "accepts no connection (nothing listens there"),
            ([.connected, .connectRetried], "accepts TCP connections but completes no ZeroMQ handshake"),
            ([.connectRetried, .connected, .handshakeSucceeded], nil),
        ] as [([ZMQMonitorEvent.Kind], String?)])
    func theLostBrokersLogLineNamesWhatTheTransportSaw(events: [ZMQMonitorEvent.Kind], seen: String?) {
        var worker = Worker()
        _ = worker.start()
        for event in events { _ = worker.transport(event) }
        worker.now = worker.now + .seconds(3)
        var actions: [Action] = []
        worker.machine.tick(now: worker.now, into: &actions)
        let lines = actions.compactMap { action -> Logger.Metadata? in
            guard case .log(_, "no word from the broker; reconnecting", let metadata) = action else { return nil }
            return metadata
        }
        #expect(lines.count == 1)
        if let seen {
            #expect(lines.first?["seen"].map { "\($0)".hasPrefix("tcp://b:5557 \(seen)") } == true, "\(lines)")
        } else {
            #expect(lines.first?["seen"] == nil, "a handshake clears it: \(lines)")
        }
    }

    @Test func aDrainFinishesTheRunningTasksAndTheOneThatCrossedDraining() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(worker.stop() == [.send(.draining)])
        #expect(worker.stop() == [])
        // Sent by the broker before it saw DRAINING: run and answered.
        #expect(worker.receive(Self.deliver(2)) == [.startTask(Self.key(2), Self.request(2), slot: 1)])
        #expect(worker.receive(.drainingAcknowledged) == [])
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [.send(.reply(tag: Self.key(1).tag, Self.ok(1)))])
        #expect(
            worker.finished(Self.key(2), Self.ok(2)) == [
                .send(.reply(tag: Self.key(2).tag, Self.ok(2))), .finish(.drained),
            ])
        #expect(worker.machine.phase == .finished)
        #expect(worker.advance(.seconds(10)) == [])
    }

    @Test func aDrainWaitsForTheBrokersAcknowledgementEvenWithNothingRunning() {
        var worker = Worker()
        _ = worker.start()
        #expect(worker.stop() == [.send(.draining)])
        #expect(worker.advance(.milliseconds(100)) == [])
        #expect(worker.receive(.drainingAcknowledged) == [.finish(.drained)])
    }

    /// The grace counts from the stop, not from the machine's start (it serves 30 s first).
    @Test func whenTheDrainGraceRunsOutTheTasksAreCancelledAndNotAnswered() {
        var worker = Worker()
        _ = worker.start()
        for _ in 0..<30 {
            _ = worker.advance(.seconds(1))
            _ = worker.receive(.heartbeat)
        }
        _ = worker.receive(Self.deliver(2))
        _ = worker.receive(Self.deliver(1))
        _ = worker.stop()
        _ = worker.receive(.drainingAcknowledged)
        // Heartbeats keep the broker alive meanwhile.
        for _ in 0..<4 {
            #expect(worker.advance(.seconds(1)) == [])
            _ = worker.receive(.heartbeat)
        }
        #expect(worker.advance(.seconds(1) - .nanoseconds(1)) == [])
        #expect(
            worker.advance(.nanoseconds(1)) == [
                .cancelTask(Self.key(1), slot: 1), .cancelTask(Self.key(2), slot: 0), .finish(.abandoned(tasks: 2)),
            ])
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [])
    }

    @Test func aDisconnectWhileDrainingEndsTheWorkerAtOnce() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        _ = worker.stop()
        #expect(worker.receive(.disconnect) == [.cancelTask(Self.key(1), slot: 0), .finish(.abandoned(tasks: 1))])
    }

    @Test func aDrainWithoutABrokerEndsWhenTheTasksAreDoneOrAtTheReconnect() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        _ = worker.stop()
        // The broker falls silent: nothing more will come, the running task still finishes.
        #expect(worker.advance(.seconds(3)) == [])
        #expect(
            worker.finished(Self.key(1), Self.ok(1)) == [
                .send(.reply(tag: Self.key(1).tag, Self.ok(1))), .finish(.drained),
            ])

        var idle = Worker()
        _ = idle.start()
        _ = idle.advance(.seconds(3))  // lost before the stop
        #expect(idle.stop() == [.send(.draining), .finish(.drained)])
    }

    /// Draining, the broker fell silent and a task still runs: when the worker would
    /// reconnect, it leaves instead (nobody would take the result), and the task is cancelled.
    @Test func aDrainWithoutABrokerLeavesAtTheReconnectWithTheTaskCancelled() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        _ = worker.stop()
        #expect(worker.advance(.seconds(3)) == [])
        #expect(worker.advance(.seconds(1)) == [.cancelTask(Self.key(1), slot: 0), .finish(.abandoned(tasks: 1))])
    }

    @Test func aStopBeforeTheStartEndsTheWorkerWithNothingSent() {
        var worker = Worker()
        #expect(worker.stop() == [.finish(.drained)])
        #expect(worker.start() == [])
    }

    @Test func aRefusalEndsTheWorkerWithItsReason() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.receive(Self.deliver(1))
        #expect(
            worker.receive(.refused(reason: "key not allowed")) == [
                .cancelTask(Self.key(1), slot: 0), .finish(.refused("key not allowed")),
            ])
        #expect(worker.receive(Self.deliver(2)) == [])
        #expect(worker.finished(Self.key(1), Self.ok(1)) == [])
    }

    @Test func theTasksCancellationEndsTheWorkerNow() {
        var worker = Worker()
        _ = worker.start()
        #expect(worker.cancel() == [.finish(.drained)])
        var busy = Worker()
        _ = busy.start()
        _ = busy.receive(Self.deliver(1))
        #expect(busy.cancel() == [.cancelTask(Self.key(1), slot: 0), .finish(.abandoned(tasks: 1))])
        #expect(busy.cancel() == [])
        // Its handler, cancelled, still returns: nothing is answered after the end.
        #expect(busy.finished(Self.key(1), Self.ok(1)) == [])
        #expect(busy.machine.running.isEmpty)
    }

    @Test func aMalformedMessageIsCountedAndDroppedAndStillProvesTheBrokerAlive() {
        var worker = Worker()
        _ = worker.start()
        _ = worker.advance(.seconds(2))
        #expect(worker.receive(frames: [Array("garbage".utf8)]) == [])
        #expect(worker.machine.malformedMessages == 1)
        #expect(worker.advance(.seconds(2)) == [])
    }

    @Test func aFirstConnectionThatCannotOpenEndsTheWorkerALaterOneIsRetried() {
        var worker = Worker()
        _ = worker.start()
        #expect(worker.connectFailed(generation: 1) == [.finish(.cannotConnect("no such host"))])

        var later = Worker()
        _ = later.start()
        _ = later.receive(.disconnect)
        #expect(later.connectFailed(generation: 1) == [])  // not the current one
        #expect(later.connectFailed(generation: 2) == [])
        #expect(later.advance(.seconds(1) - .nanoseconds(1)) == [])
        #expect(later.advance(.nanoseconds(1)) == [.connect(generation: 3)])
    }

    /// Pointed at the broker's events port (an XPUB: the handshake fails on the socket type and
    /// libzmq never reconnects), or at a broker that requires CURVE, the worker reconnected
    /// forever saying only that the broker was silent. Three connections closed before their
    /// handshake now end it with the causes named; each reconnects at once.
    @Test func connectionsThatCloseBeforeTheirHandshakeEndTheWorkerWithTheCauseNamed() throws {
        var worker = Worker()
        #expect(worker.start() == [.connect(generation: 1)])
        #expect(worker.transport(.disconnected) == [.connect(generation: 2)])
        #expect(worker.transport(.disconnected, generation: 1) == [])  // an older connection
        #expect(worker.transport(.disconnected) == [.connect(generation: 3)])
        let last = worker.transport(.disconnected)
        guard case .finish(.cannotConnect(let reason)) = try #require(last.first), last.count == 1 else {
            Issue.record("expected the worker to end, got \(last)")
            return
        }
        #expect(reason.contains("3 connections in a row closed before their ZeroMQ handshake completed"))
        #expect(reason.contains("tcp://b:5557 is not a broker's workers endpoint (its events port?"))
        #expect(reason.contains("the broker requires CURVE and this worker has no keys"))
        #expect(worker.transport(.disconnected) == [])
    }

    @Test func aHandshakeBetweenClosesStartsTheCountAgainAndAClosedServingConnectionIsNoStrike() {
        var worker = Worker()
        _ = worker.start()
        #expect(worker.transport(.disconnected) == [.connect(generation: 2)])
        #expect(worker.transport(.disconnected) == [.connect(generation: 3)])
        #expect(worker.transport(.handshakeSucceeded) == [])
        _ = worker.receive(Self.deliver(1))
        // A broker that restarts: libzmq reconnects by itself, nothing to do here.
        #expect(worker.transport(.disconnected) == [])
        #expect(worker.transport(.disconnected) == [.cancelTask(Self.key(1), slot: 0), .connect(generation: 4)])
        #expect(worker.transport(.disconnected) == [.connect(generation: 5)])
        #expect(worker.machine.isFinished == false)
    }

    /// An active broker and a standby (`--broker A,B`): a lost connection leaves for the next
    /// endpoint at once, the tasks of the lost one cancelled (the broker that takes over runs
    /// them again).
    @Test func withSeveralEndpointsALostBrokerIsLeftForTheNext() {
        var worker = Worker(endpoints: 2)
        _ = worker.start()
        #expect(worker.transport(.handshakeSucceeded) == [])
        _ = worker.receive(Self.deliver(1))
        #expect(worker.transport(.disconnected) == [.cancelTask(Self.key(1), slot: 0), .connect(generation: 2)])
        #expect(worker.machine.endpoint == 1)
        var single = Worker()
        _ = single.start()
        _ = single.transport(.handshakeSucceeded)
        #expect(single.transport(.disconnected) == [], "one endpoint: libzmq reconnects to it")
    }

    /// A standby binds nothing: an endpoint that refuses connections is left after a short
    /// dwell, and the endpoints are tried in turn until one accepts.
    @Test func withSeveralEndpointsARefusingOneIsLeftAfterAShortDwell() {
        var worker = Worker(endpoints: 2)
        _ = worker.start()
        #expect(worker.transport(.connectRetried) == [], "within the dwell")
        _ = worker.advance(WorkerStateMachine.refusedEndpointDwell)
        #expect(worker.transport(.connectRetried) == [.connect(generation: 2)])
        #expect(worker.machine.endpoint == 1)
        _ = worker.advance(WorkerStateMachine.refusedEndpointDwell)
        #expect(worker.transport(.connectRetried) == [.connect(generation: 3)])
        #expect(worker.machine.endpoint == 0)
        _ = worker.transport(.handshakeSucceeded)
        _ = worker.advance(WorkerStateMachine.refusedEndpointDwell)
        #expect(worker.transport(.connectRetried) == [], "connected: a refusal is libzmq's own retry")
        var single = Worker()
        _ = single.start()
        _ = single.advance(.seconds(1))
        #expect(single.transport(.connectRetried) == [])
    }

    /// A silent broker (frozen, or cut off while a standby takes over) is left for the next
    /// endpoint when the worker reconnects.
    @Test func withSeveralEndpointsASilentBrokerIsLeftForTheNext() {
        var worker = Worker(endpoints: 2)
        _ = worker.start()
        _ = worker.transport(.handshakeSucceeded)
        var reconnect: [Action] = []
        for _ in 0..<10 where reconnect.isEmpty { reconnect = worker.advance(.seconds(1)) }
        #expect(reconnect == [.connect(generation: 2)])
        #expect(worker.machine.endpoint == 1)
    }

    @Test func aKeyTheBrokersAllowListRefusesEndsTheWorkerWithThatNamed() {
        var worker = Worker()
        _ = worker.start()
        #expect(
            worker.transport(.handshakeFailedAuth, value: 400) == [
                .finish(
                    .refused(
                        "tcp://b:5557 refused this worker's key during the handshake (ZAP status 400): it is not on the broker's worker allow-list (--worker-keys)"
                    ))
            ])
    }
}
