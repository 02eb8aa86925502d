import Logging
import SkyProtocol
import SkyWire
import SkyZMQ
import Testing

@testable import Sky

/// The client's state machine driven like the broker's and the worker's: one line per input and
/// the actions it must return (logs left out), time moved by hand, no sockets, no tasks, no
/// sleeps. The request table's own rules (attempts, backoff, coalescing) have their tests in
/// ``RequestTableTests``; these cover what the machine adds: sockets, endpoints, the
/// handshake, refusals, callers waiting for a connection, and closing.
@Suite("Client state machine: sockets, endpoints, handshake, refusal, closing")
struct ClientStateMachineTests {
    typealias Action = ClientStateMachine.Action

    struct Client {
        var machine: ClientStateMachine
        var now = Duration.zero

        init(endpoints: [String] = ["tcp://a:1"], credentials: Bool = false) {
            machine = ClientStateMachine(
                endpoints: endpoints, usesCredentials: credentials,
                table: RequestTable(connectTimeout: .seconds(5), endpointCount: endpoints.count, seed: 1), seed: 2)
        }

        private static func withoutLogs(_ actions: [Action]) -> [Action] {
            actions.filter { if case .log = $0 { false } else { true } }
        }

        mutating func start(
            _ waiter: UInt64, service: String = "svc", body: [UInt8] = [1], timeout: Duration = .seconds(1)
        ) -> [Action] {
            let call = RequestTable.Call(
                service: service, body: body, options: ScanOptions(timeout: timeout, retry: .never, coalesce: false))
            return Self.withoutLogs(machine.start(call, waiter: waiter, now: now))
        }

        mutating func event(_ kind: ZMQMonitorEvent.Kind, value: Int32 = 0, socket: Int? = nil) -> [Action] {
            let event = ZMQMonitorEvent(kind: kind, value: value, endpoint: "tcp://a:1")
            return Self.withoutLogs(machine.monitor(event, socket: socket ?? machine.socket, now: now))
        }

        mutating func receive(_ frames: [[UInt8]], socket: Int? = nil) -> [Action] {
            Self.withoutLogs(machine.received(frames, socket: socket ?? machine.socket, now: now))
        }

        mutating func reply(_ reply: TaskReply, socket: Int? = nil) -> [Action] {
            receive(BrokerToClient.reply(reply).encode(), socket: socket)
        }

        mutating func advance(_ duration: Duration) -> [Action] {
            now += duration
            return Self.withoutLogs(machine.expire(now: now))
        }

        /// The request of the one send of a call among `actions` (not the machine's own
        /// `mmi.features` question), and the socket it goes out on.
        static func request(_ actions: [Action]) -> (socket: Int, request: TaskRequest)? {
            for case .send(let socket, .request(let request)) in actions where request.service != BrokerService.features
            {
                return (socket, request)
            }
            return nil
        }

        /// The machine's `mmi.features` question among `actions`.
        static func featuresQuestion(_ actions: [Action]) -> TaskRequest? {
            for case .send(_, .request(let request)) in actions where request.service == BrokerService.features {
                return request
            }
            return nil
        }

        /// `actions` without the machine's `mmi.features` question.
        static func withoutQuestion(_ actions: [Action]) -> [Action] {
            actions.filter {
                if case .send(_, .request(let request)) = $0 { request.service != BrokerService.features } else { true }
            }
        }
    }

    @Test func aCallWaitsForTheHandshakeThenGoesOutAndIsAnswered() throws {
        var client = Client()
        #expect(client.start(1) == [], "held: no connection yet")
        #expect(client.machine.waitForConnection(7) == [])
        let up = client.event(.handshakeSucceeded)
        #expect(up.first == .connected([7]), "callers waiting for a connection go first")
        let (socket, request) = try #require(Client.request(up))
        #expect(socket == 0 && request.header.attempt == 1)
        #expect(client.machine.waitForConnection(8) == [.connected([8])], "already up")
        #expect(
            client.reply(TaskReply(requestID: request.requestID, status: .ok, body: [5])) == [
                .succeed([1], body: [5], attempts: 1)
            ])
        #expect(client.machine.table.callCount == 0)
    }

    /// A call to a name the broker would drop unanswered is refused here, however the names of
    /// the calls before it went (the machine checks a name only when it changes).
    @Test func aCallToAnInvalidServiceNameIsRefusedWhateverCameBefore() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        for (waiter, service) in [(1, "svc"), (2, "bad\nname"), (3, "svc"), (4, ""), (5, "bad\nname")]
            as [(UInt64, String)]
        {
            let actions = client.start(waiter, service: service)
            if service == "svc" {
                #expect(try #require(Client.request(actions)).request.service == "svc")
            } else {
                guard case .fail(let waiters, let error, let attempts)? = actions.first, actions.count == 1 else {
                    Issue.record("\(service): \(actions)")
                    continue
                }
                #expect(waiters == [waiter] && error.code == .invalidTask && attempts == 0)
                #expect("\(error)".contains("service name"))
            }
        }
        #expect(client.machine.table.counters.attemptsSent == 2)
    }

    /// A call that finds no connection names what the transport saw of the endpoint: nothing
    /// accepting there, or TCP without a ZeroMQ handshake (another server on that port). Both
    /// were only "no connection to the broker for 5 s".
    @Test func aCallThatFindsNoConnectionNamesWhatTheTransportSaw() throws {
        var client = Client()
        var waiter: UInt64 = 0
        /// The brokerUnreachable message of a call that waited 5 s while the monitor saw `events`.
        func failure(after events: [ZMQMonitorEvent.Kind]) -> String? {
            waiter += 1
            _ = client.start(waiter, timeout: .seconds(60))
            for event in events { _ = client.event(event) }
            for case .fail(_, .brokerUnreachable(let message), _) in client.advance(.seconds(5)) { return message }
            return nil
        }
        let refused = try #require(failure(after: [.connectRetried]))
        #expect(
            refused.hasSuffix(
                ": tcp://a:1 accepts no connection (nothing listens there, or the host is unreachable or does not resolve)"
            ),
            "\(refused)")
        // TCP, then closed without a handshake (a server that speaks no ZeroMQ), then retried:
        // still not "nothing listens".
        let silent = try #require(failure(after: [.connected, .disconnected, .connectRetried]))
        #expect(
            silent.hasSuffix(
                ": tcp://a:1 accepts TCP connections but completes no ZeroMQ handshake (another kind of server on that port?)"
            ),
            "\(silent)")
        // Once a handshake succeeded, a later loss starts from nothing seen.
        let lost = try #require(failure(after: [.handshakeSucceeded, .disconnected]))
        #expect(!lost.contains("accepts"), "\(lost)")
    }

    @Test func everyCallGetsItsOwnRequestID() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        let ids = try (1...100).map { waiter in try #require(Client.request(client.start(waiter))).request.requestID }
        #expect(Set(ids).count == 100)
    }

    @Test func aLostConnectionSendsTheCallAgainOnTheNextWithARaisedAttempt() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        let first = try #require(Client.request(client.start(1))).request
        #expect(client.event(.disconnected) == [], "a connection lost after its handshake is not a refusal")
        let again = try #require(Client.request(client.event(.handshakeSucceeded))).request
        #expect(again.requestID == first.requestID && again.header.attempt == 2)
    }

    @Test func anAbandonedCallIsCancelledAtTheBrokerOnTheSocketInUse() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        let request = try #require(Client.request(client.start(1))).request
        #expect(client.machine.abandon(1) == [.send(socket: 0, .cancel(request.requestID))])
        #expect(client.machine.abandon(1) == [], "abandoned once")
    }

    @Test func aSilentEndpointIsLeftForTheNextOnANewSocketWhoseOldMessagesAreIgnored() throws {
        var client = Client(endpoints: ["tcp://a:1", "tcp://b:2"])
        #expect(client.advance(.seconds(4)) == [])
        // A call made a second before the failover: it waits for a connection for 5 s.
        #expect(client.start(1, timeout: .seconds(60)) == [])
        #expect(client.advance(.seconds(1) - .nanoseconds(1)) == [], "not a nanosecond early")
        let switched = client.advance(.nanoseconds(1))
        #expect(switched.prefix(2) == [.close(socket: 0), .open(socket: 1, endpoint: 1)])
        #expect(client.machine.socket == 1 && client.machine.endpointIndex == 1)
        // The old socket's handshake and replies belong to a connection given up.
        #expect(client.event(.handshakeSucceeded, socket: 0) == [])
        #expect(client.machine.table.isConnected == false)
        let sent = try #require(Client.request(client.event(.handshakeSucceeded, socket: 1)))
        #expect(sent.socket == 1)
        #expect(client.reply(TaskReply(requestID: sent.request.requestID, status: .ok, body: []), socket: 0) == [])
        #expect(
            client.reply(TaskReply(requestID: sent.request.requestID, status: .ok, body: [])) == [
                .succeed([1], body: [], attempts: 1)
            ])
    }

    @Test func connectionsClosedDuringTheirHandshakeThreeTimesRefuseTheClientForGood() {
        var client = Client(credentials: true)
        _ = client.start(1)
        _ = client.machine.waitForConnection(9)
        // Each close during the handshake opens a new socket at once: after a socket-type
        // mismatch (the broker's events port) libzmq itself never reconnects.
        #expect(client.event(.disconnected) == [.close(socket: 0), .open(socket: 1, endpoint: 0)])
        #expect(client.event(.disconnected) == [.close(socket: 1), .open(socket: 2, endpoint: 0)])
        let refused = client.event(.disconnected)
        guard case .fail([1], let error, attempts: 1) = refused.dropFirst().first else {
            Issue.record("the call fails: \(refused)")
            return
        }
        #expect(error.code == .unauthorized)
        #expect("\(error)".contains("public key given to this client is probably not the broker's"))
        #expect("\(error)".contains("or it is not a broker's clients endpoint (its events port?)"))
        #expect(refused.first == .close(socket: 2), "stops knocking")
        #expect(refused.last == .connectionFailed([9], error))
        #expect(client.start(2) == [.fail([2], error, attempts: 0)], "later calls fail at once")
        #expect(client.machine.waitForConnection(10) == [.connectionFailed([10], error)])
        #expect(client.machine.nextDeadline() == nil && client.advance(.seconds(60)) == [])
        #expect(client.event(.handshakeSucceeded) == [], "a refusal is final")
    }

    @Test func aHandshakeBetweenClosedConnectionsResetsTheStrikes() {
        var client = Client()
        for _ in 0..<5 {
            let socket = client.machine.socket
            #expect(client.event(.disconnected) == [.close(socket: socket), .open(socket: socket + 1, endpoint: 0)])
            #expect(
                client.event(.disconnected) == [.close(socket: socket + 1), .open(socket: socket + 2, endpoint: 0)])
            _ = client.event(.handshakeSucceeded)
            #expect(client.event(.disconnected) == [])
        }
        #expect(client.machine.refusal == nil)
    }

    @Test(arguments: [
        (ZMQMonitorEvent.Kind.handshakeFailedAuth, false, "not on the broker's client allow-list"),
        (.handshakeFailedProtocol, false, "this client has no credentials"),
        (.handshakeFailedProtocol, true, "does not speak CURVE, or rejected these keys"),
    ])
    func aFailedSecurityHandshakeRefusesNamingTheCause(kind: ZMQMonitorEvent.Kind, credentials: Bool, cause: String) {
        var client = Client(credentials: credentials)
        _ = client.start(1)
        let refused = client.event(kind, value: 400)
        #expect(refused.first == .close(socket: 0))
        guard case .fail([1], let error, _) = refused.last else {
            Issue.record("\(refused)")
            return
        }
        #expect(error.code == .unauthorized && "\(error)".contains(cause), "\(error)")
    }

    @Test func aWrongEndpointAnswerRefusesEveryCallWithTheBrokersWords() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        let request = try #require(Client.request(client.start(1))).request
        _ = client.start(2)
        let refused = client.reply(
            .failure(request.requestID, .wrongEndpoint, type: nil, message: "this is the workers endpoint"))
        #expect(refused.first == .close(socket: 0))
        let failed = refused.compactMap { action -> [UInt64]? in
            guard case .fail(let waiters, let error, _) = action, error.code == .wrongEndpoint else { return nil }
            #expect("\(error)".contains("this is the workers endpoint"))
            return Array(waiters)
        }
        #expect(Set(failed.joined()) == [1, 2])
    }

    @Test func aMessageThatIsNotASkyReplyIsDroppedAndTheCallGoesOn() throws {
        var client = Client()
        _ = client.event(.handshakeSucceeded)
        _ = client.start(1)
        var actions: [Action] = []
        actions = client.machine.received([[0xFF], [1, 2, 3]], socket: 0, now: .zero)
        #expect(actions.count == 1)
        guard case .log(.warning, _, _) = actions.first else {
            Issue.record("one warning: \(actions)")
            return
        }
        #expect(client.machine.table.callCount == 1)
        #expect(client.machine.received([[0xFF]], socket: 0, now: .zero) == [], "only the first is logged")
        #expect(client.machine.table.counters.malformedMessages == 2)
    }

    @Test func closingFailsEveryCallAndConnectionWaiterOnceAndLaterCallsAtOnce() {
        var client = Client()
        _ = client.start(1)
        _ = client.start(2, body: [2])
        _ = client.machine.waitForConnection(3)
        let closed = client.machine.close()
        #expect(closed.contains(.connectionFailed([3], .clientClosed)))
        #expect(closed.filter { if case .fail(_, .clientClosed, _) = $0 { true } else { false } }.count == 2)
        #expect(client.machine.close() == [], "closed once")
        #expect(client.start(4) == [.fail([4], .clientClosed, attempts: 0)])
        #expect(client.machine.nextDeadline() == nil)
    }

    @Test func aCallerWhoStopsWaitingForTheConnectionIsNotResumedAgain() {
        var client = Client()
        _ = client.machine.waitForConnection(1)
        _ = client.machine.waitForConnection(2)
        client.machine.stopWaitingForConnection(1)
        #expect(Client.withoutQuestion(client.event(.handshakeSucceeded)) == [.connected([2])])
    }
}

/// docs/protocol.md, "Packed messages": the machine asks `mmi.features` once a connection is
/// up (not as a call: nothing counts it), and sends its calls packed once the broker named
/// `packed`; a new connection asks again and is framed until answered.
@Suite("Client state machine: what the broker takes, asked once per connection")
struct ClientFeaturesTests {
    typealias Client = ClientStateMachineTests.Client
    typealias Action = ClientStateMachine.Action

    static func answer(_ question: TaskRequest, _ lines: [String]) -> TaskReply {
        TaskReply(requestID: question.requestID, status: .ok, body: Array(lines.joined(separator: "\n").utf8))
    }

    static func isPacked(_ actions: [Action]) -> Bool {
        actions.contains { if case .send(_, .packedRequest) = $0 { true } else { false } }
    }

    @Test func aBrokerThatTakesPackedRequestsGetsThemOnceItSaidSo() throws {
        var client = Client()
        _ = client.start(1)
        let up = client.event(.handshakeSucceeded)
        let question = try #require(Client.featuresQuestion(up))
        #expect(question.header.attempt == 1 && question.header.timeoutMilliseconds == 5000)
        #expect(question.body == Array("edition=2".utf8), "the client names its edition")
        // The held call went out framed with it; the question is no call.
        #expect(Client.request(up) != nil && !Self.isPacked(up))
        #expect(client.machine.table.callCount == 1 && client.machine.table.counters.attemptsSent == 1)
        #expect(client.machine.waitForFeatures(9, now: client.now) == [], "not answered yet")

        let answered = client.reply(Self.answer(question, ["trace-context", "max-frame-size=65536", "packed"]))
        #expect(
            answered == [.featuresKnown([9], BrokerFeatures(takesTrace: true, maxFrameSize: 65536, takesPacked: true))])
        #expect(client.machine.table.counters.unmatchedReplies == 0, "the answer is the machine's, not a stray reply")
        #expect(client.machine.sendsPacked)
        let next = client.start(2)
        guard case .send(0, .packedRequest(let packed))? = next.first else {
            Issue.record("expected a packed REQUEST, got \(next)")
            return
        }
        #expect(packed.service == "svc")
        // A packed reply answers it, as a framed one does.
        #expect(
            client.receive(
                BrokerToClient.packedReply(TaskReply(requestID: packed.requestID, status: .ok, body: [3])).encode())
                == [.succeed([2], body: [3], attempts: 1)])
        #expect(client.machine.waitForFeatures(10, now: client.now).count == 1, "known: at once")

        // Another connection may reach another broker: framed until it answers again.
        _ = client.event(.disconnected)
        #expect(!client.machine.sendsPacked)
        let again = client.event(.handshakeSucceeded)
        let second = try #require(Client.featuresQuestion(again))
        #expect(second.requestID != question.requestID)
        #expect(!Self.isPacked(client.start(3)))
        _ = client.reply(Self.answer(second, ["packed"]))
        #expect(Self.isPacked(client.start(4)))
    }

    /// A broker that predates `mmi.features` answers unknownService, and one that predates
    /// packed messages does not name them: calls stay framed. A question nobody answers is
    /// given up after `connectTimeout`, and the callers waiting for it learn nothing new.
    @Test(arguments: [true, false])
    func anOlderBrokerGetsFramedCalls(answers: Bool) throws {
        var client = Client()
        let question = try #require(Client.featuresQuestion(client.event(.handshakeSucceeded)))
        _ = client.machine.waitForFeatures(1, now: client.now)
        if answers {
            let old = TaskReply.failure(question.requestID, .unknownService, message: "501: no mmi.features")
            #expect(client.reply(old) == [.featuresKnown([1], BrokerFeatures())])
        } else {
            #expect(client.advance(.seconds(4)).isEmpty)
            #expect(client.advance(.seconds(1)) == [.featuresKnown([1], BrokerFeatures())])
        }
        #expect(!client.machine.sendsPacked && !Self.isPacked(client.start(2)))
    }

    /// Without a connection a caller waits for the features `connectTimeout` at most; a closing
    /// client resumes the rest.
    @Test func withoutAConnectionCallersWaitForTheFeaturesConnectTimeoutAtMost() {
        var client = Client()
        #expect(client.machine.waitForFeatures(1, now: client.now) == [])
        _ = client.advance(.seconds(2))
        #expect(client.machine.waitForFeatures(2, now: client.now) == [])
        #expect(client.machine.nextDeadline() == .seconds(5))
        #expect(client.advance(.seconds(3)) == [.featuresKnown([1], nil)])
        #expect(client.machine.close().contains(.featuresKnown([2], nil)))
    }

    /// A caller whose call has a deadline waits for the features until then at most, even
    /// behind callers that came earlier and wait longer: the question is part of its call.
    @Test func aCallersDeadlineEndsItsWaitForTheFeatures() {
        var client = Client()
        #expect(client.machine.waitForFeatures(1, now: client.now) == [])
        #expect(client.machine.waitForFeatures(2, by: .milliseconds(300), now: client.now) == [])
        #expect(client.machine.nextDeadline() == .milliseconds(300))
        #expect(client.advance(.milliseconds(300)) == [.featuresKnown([2], nil)])
        #expect(client.machine.nextDeadline() == .seconds(5))
        #expect(client.advance(.milliseconds(4700)) == [.featuresKnown([1], nil)])
    }
}
