import Logging
import SkyProtocol
import SkyWire

/// Everything a client decides, as a value: its calls in flight (a ``RequestTable``), which
/// broker endpoint and socket it uses, the handshake watch, a refusal by the broker, callers
/// waiting for a connection, and closing. Inputs (a call, a caller leaving, a message, a socket
/// event, the passing of time, closing) carry `now` and append the ``Action``s the shell must
/// carry out to its list; nothing here touches a socket, a clock or a task, so tests drive it line by line.
///
/// The shell (``SkyClient``) runs it inline on the client's I/O thread, as the broker and the
/// worker run theirs: a reply crosses no other thread before the waiting caller is resumed, so
/// it wakes exactly one thread, the caller's.
struct ClientStateMachine: Sendable {
    typealias WaiterID = RequestTable.WaiterID

    enum Action: Equatable {
        /// Send this on broker socket number `socket`.
        case send(socket: Int, ClientToBroker)
        /// The call succeeded: resume these waiters with the result.
        case succeed(WaiterList, body: [UInt8], attempts: Int)
        /// The call failed for good (`attempts` 0: it never went out).
        case fail(WaiterList, SkyError, attempts: Int)
        /// A connection is up: resume these callers of ``waitForConnection(_:)``.
        case connected([WaiterID])
        /// No connection will come (the client closed, or the broker refused it).
        case connectionFailed([WaiterID], SkyError)
        /// Resume these callers of ``waitForFeatures(_:by:now:into:)`` with what the broker of this
        /// connection said of itself (`nil`: nothing known, within their wait).
        case featuresKnown([WaiterID], BrokerFeatures?)
        /// Open broker socket number `socket`, a DEALER connected to `endpoints[endpoint]`.
        case open(socket: Int, endpoint: Int)
        /// Close broker socket number `socket`.
        case close(socket: Int)
        case log(Logger.Level, String, Logger.Metadata = [:])
    }

    /// Why calls end before they are sent, once and for all.
    private enum Phase: Equatable {
        case serving
        /// The broker will not serve this client as configured (its keys, or the endpoint it
        /// was given): every call fails with this, now and from now on.
        case refused(SkyError)
        case closed
    }

    let endpoints: [String]
    let usesCredentials: Bool
    private(set) var table: RequestTable
    private var phase = Phase.serving
    /// The broker socket in use: messages and events of older ones are ignored.
    private(set) var socket = 0
    private(set) var endpointIndex = 0
    private var handshake = HandshakeWatch()
    /// Endpoints were switched since the last connection: further switches log at debug (with
    /// every endpoint down they come ten times a second).
    private var switchedSinceConnected = false
    /// What the broker socket's monitor showed while no connection is up.
    private var unreachable = UnreachableCause()
    private var connectionWaiters: [WaiterID] = []
    /// Request ids' random bits (the table puts a call's slot in the low 32), from a generator
    /// seeded at random, not the system's random source (one system call per id). Unique within
    /// the client; the broker keys them by client too.
    private var requestIDs: SplitMix64
    /// The last service name found valid: a call's name is checked once per change of name,
    /// here on the I/O thread (its bytes' check on every call cost a call more than the rest of
    /// its refusals at once together).
    private var validService = ""
    /// What the broker said of itself in `mmi.features` during connection `epoch`. The machine
    /// asks once a connection is up (a reconnect may reach another broker), not as a call: it
    /// is counted nowhere and waits for nothing but its answer or `connectTimeout`.
    private(set) var features: (epoch: UInt64, answer: BrokerFeatures)?
    /// The question in flight, and when it is given up (the broker then counts as saying nothing new).
    private var featuresAsk: (id: RequestID, deadline: Duration)?
    /// Callers waiting for ``features``, each until a deadline (`connectTimeout` after it came,
    /// or its call's deadline if sooner), earliest first.
    private var featureWaiters: [(waiter: WaiterID, deadline: Duration)] = []

    init(endpoints: [String], usesCredentials: Bool, table: RequestTable, seed: UInt64) {
        self.endpoints = endpoints
        self.usesCredentials = usesCredentials
        self.table = table
        requestIDs = SplitMix64(seed: seed)
    }

    // MARK: Queries

    /// The failure every call meets now, if the client closed or was refused.
    var refusal: SkyError? {
        switch phase {
        case .serving: nil
        case .refused(let error): error
        case .closed: .clientClosed
        }
    }

    /// Callers waiting for a connection.
    var connectionWaiterCount: Int { connectionWaiters.count }

    /// When ``expire(now:)`` next has something to do.
    mutating func nextDeadline() -> Duration? {
        guard phase == .serving else { return nil }
        // Asked after every wake-up: compared in place, not gathered into an array.
        func earlier(_ first: Duration?, _ second: Duration?) -> Duration? {
            guard let first else { return second }
            guard let second else { return first }
            return min(first, second)
        }
        return earlier(earlier(table.nextDeadline(), featuresAsk?.deadline), featureWaiters.first?.deadline)
    }

    /// The broker of this connection takes packed REQUESTs (docs/protocol.md, "Packed messages").
    var sendsPacked: Bool {
        guard let features, features.epoch == table.connectionEpoch else { return false }
        return features.answer.takesPacked
    }

    // MARK: Inputs

    /// A caller starts a call.
    mutating func start(
        _ call: consuming RequestTable.Call, waiter: WaiterID, now: Duration, into actions: inout [Action]
    ) {
        if let refusal {
            actions.append(.fail([waiter], refusal, attempts: 0))
            return
        }
        // The broker drops a request with an invalid name unanswered; refused here instead.
        if call.service != validService {
            if let problem = WireFormat.nameProblem(call.service, what: "service name") {
                actions.append(.fail([waiter], .invalidTask(problem), attempts: 0))
                return
            }
            validService = call.service
        }
        let random = RequestID(high: requestIDs.next(), low: requestIDs.next())
        var output = tableOutput(taking: &actions)
        table.start(call, random: random, waiter: waiter, now: now, into: &output)
        tableDone(&output, into: &actions)
    }

    /// A caller waits for what the broker of this connection says of itself: at once if known,
    /// else until the machine's question is answered, or `connectTimeout` at most (or until
    /// `deadline`, the caller's call's, if that comes first).
    mutating func waitForFeatures(
        _ waiter: WaiterID, by deadline: Duration? = nil, now: Duration, into actions: inout [Action]
    ) {
        if refusal != nil {
            actions.append(.featuresKnown([waiter], nil))
        } else if table.isConnected, let features, features.epoch == table.connectionEpoch {
            actions.append(.featuresKnown([waiter], features.answer))
        } else {
            let until = deadline.map { min(now + table.connectTimeout, $0) } ?? now + table.connectTimeout
            // Kept in order of their deadlines: the first is the next to pass.
            let place = featureWaiters.firstIndex { $0.deadline > until } ?? featureWaiters.endIndex
            featureWaiters.insert((waiter, until), at: place)
        }
    }

    /// A caller stopped waiting for the features; the shell already resumed it.
    mutating func stopWaitingForFeatures(_ waiter: WaiterID) {
        featureWaiters.removeAll { $0.waiter == waiter }
    }

    /// A caller stopped waiting (its task was cancelled); the shell
    /// already resumed it.
    mutating func abandon(_ waiter: WaiterID, into actions: inout [Action]) {
        var output = tableOutput(taking: &actions)
        table.abandon(waiter, into: &output)
        tableDone(&output, into: &actions)
    }

    /// A caller waits until a connection is up.
    mutating func waitForConnection(_ waiter: WaiterID, into actions: inout [Action]) {
        if let refusal {
            actions.append(.connectionFailed([waiter], refusal))
        } else if table.isConnected {
            actions.append(.connected([waiter]))
        } else {
            connectionWaiters.append(waiter)
        }
    }

    /// A caller stopped waiting for a connection; the shell already resumed it.
    mutating func stopWaitingForConnection(_ waiter: WaiterID) {
        connectionWaiters.removeAll { $0 == waiter }
    }

    /// A message arrived on broker socket number `socket`.
    mutating func received(_ frames: [[UInt8]], socket: Int, now: Duration, into actions: inout [Action]) {
        received(Frames(frames), socket: socket, now: now, into: &actions)
    }

    /// A message from broker socket number `socket`, in one buffer as the shell reads it.
    mutating func received(_ frames: Frames, socket: Int, now: Duration, into actions: inout [Action]) {
        guard socket == self.socket, phase == .serving else { return }
        let reply: TaskReply
        switch try? BrokerToClient.decode(frames) {
        case .reply(let framed)?, .packedReply(let framed)?:
            reply = framed
        case nil:
            guard table.malformedMessage() else { return }
            actions.append(
                .log(
                    .warning,
                    "dropped a message from the broker that is not a Sky reply; further ones are only counted (statistics.malformedMessages)"
                ))
            return
        }
        if reply.status == .wrongEndpoint {
            // A configuration mistake, not a failure of this call: every call fails with it.
            refuse(.wrongEndpoint(RemoteErrorBody(decoding: reply.body).message), into: &actions)
            return
        }
        if let ask = featuresAsk, reply.requestID == ask.id {
            featuresAsk = nil
            // A broker that predates `mmi.features` answers unknownService: it says nothing new.
            learned(reply.status == .ok ? BrokerFeatures(decoding: reply.body) : BrokerFeatures(), into: &actions)
            return
        }
        var output = tableOutput(taking: &actions)
        table.received(reply, now: now, into: &output)
        tableDone(&output, into: &actions)
    }

    /// The monitor of broker socket number `socket` reported `event`.
    mutating func monitor(_ event: ZMQMonitorEvent, socket: Int, now: Duration, into actions: inout [Action]) {
        guard socket == self.socket, phase == .serving else { return }
        let endpoint: Logger.Metadata = ["endpoint": "\(event.endpoint)"]
        unreachable.observe(event)
        table.unreachableHint = unreachable.text
        switch event.kind {
        case .handshakeSucceeded:
            handshake.succeeded()
            actions.append(.log(switchedSinceConnected ? .info : .debug, "connected to the broker", endpoint))
            switchedSinceConnected = false
            if !connectionWaiters.isEmpty {
                actions.append(.connected(connectionWaiters))
                connectionWaiters.removeAll()
            }
            askFeatures(now: now, into: &actions)
            var output = tableOutput(taking: &actions)
            table.connectionUp(now: now, into: &output)
            tableDone(&output, into: &actions)
        case .disconnected:
            if handshake.closedBeforeHandshake() {
                // A CURVE server that cannot open our HELLO (we hold the wrong server key) just
                // closes the connection, and one that gets a NULL greeting often closes before
                // libzmq reports the mechanism mismatch: both look like this, again and again.
                refuse(
                    .unauthorized(
                        "\(event.endpoint) closed the connection during the handshake \(HandshakeWatch.strikes) times in a row: "
                            + (usesCredentials
                                ? "the broker public key given to this client is probably not the broker's,"
                                    + " or it is not a broker's clients endpoint (its events port?)"
                                : "it is not a broker's clients endpoint (its events port? another program's?),"
                                    + " or the broker requires CURVE (then give this client credentials)")),
                    into: &actions)
                return
            }
            if handshake.closedInARowSoFar > 0 {
                // Closed during the handshake: after a socket-type mismatch (the broker's events
                // port) libzmq never reconnects, so a new socket tries again at once.
                actions.append(.close(socket: self.socket))
                self.socket += 1
                actions.append(.open(socket: self.socket, endpoint: endpointIndex))
                return
            }
            table.connectionDown(now: now)
            // The next connection asks again (it may reach another broker).
            featuresAsk = nil
            actions.append(.log(.info, "lost the connection to the broker; reconnecting", endpoint))
        case .handshakeFailedAuth:
            refuse(
                .unauthorized(
                    "\(event.endpoint) refused this client's key (ZAP status \(event.value)): it is not on the broker's client allow-list"
                ), into: &actions)
        case .handshakeFailedProtocol:
            refuse(
                .unauthorized(
                    "the security handshake with \(event.endpoint) failed (libzmq protocol error 0x\(String(UInt32(bitPattern: event.value), radix: 16))): "
                        + (usesCredentials
                            ? "the broker does not speak CURVE, or rejected these keys"
                            : "the broker requires CURVE and this client has no credentials")), into: &actions)
        case .handshakeFailedNoDetail:
            actions.append(
                .log(.warning, "handshake with the broker failed", endpoint.merging(["code": "\(event.value)"]) { $1 }))
        case .connectRetried:
            table.endpointRefused(now: now)
        default:
            break
        }
    }

    /// Broker socket number `socket` could not be opened. Calls wait as for any missing
    /// connection: with several endpoints the next is tried after `connectTimeout`.
    func openFailed(socket: Int, error: String, into actions: inout [Action]) {
        guard socket == self.socket else { return }
        actions.append(
            .log(
                .error, "cannot connect to the broker",
                ["endpoint": "\(endpoints[endpointIndex])", "error": "\(error)"]))
    }

    /// Time passed: attempts time out, backoffs end, a silent endpoint is given up for the next.
    mutating func expire(now: Duration, into actions: inout [Action]) {
        guard phase == .serving else { return }
        if let ask = featuresAsk, now >= ask.deadline {
            featuresAsk = nil
            learned(BrokerFeatures(), into: &actions)
        }
        if let first = featureWaiters.first, now >= first.deadline {
            let due = featureWaiters.filter { now >= $0.deadline }.map(\.waiter)
            featureWaiters.removeAll { now >= $0.deadline }
            actions.append(.featuresKnown(due, nil))
        }
        var output = tableOutput(taking: &actions)
        table.expire(now: now, into: &output)
        tableDone(&output, into: &actions)
    }

    /// The client is closing: every call and every caller waiting for a connection fails.
    mutating func close(into actions: inout [Action]) {
        guard phase != .closed else { return }
        phase = .closed
        // Its calls are dropped at the broker too: their work would hold workers' slots until
        // the broker's lease ran out (a kept call's CANCEL asks the broker to keep it instead).
        endAll(.clientClosed, cancelling: true, into: &actions)
    }

    // MARK: Steps

    /// The broker will not serve this client as configured: every call fails with `error` now
    /// and from now on, and the connection is closed, so the client does not knock again and
    /// again.
    private mutating func refuse(_ error: SkyError, into actions: inout [Action]) {
        phase = .refused(error)
        actions.append(.log(.error, "giving up on this broker", ["reason": "\(error)"]))
        actions.append(.close(socket: socket))
        endAll(error, into: &actions)
    }

    private mutating func endAll(_ error: SkyError, cancelling: Bool = false, into actions: inout [Action]) {
        var output = tableOutput(taking: &actions)
        table.failAll(error, cancelling: cancelling, into: &output)
        tableDone(&output, into: &actions)
        if !connectionWaiters.isEmpty {
            actions.append(.connectionFailed(connectionWaiters, error))
            connectionWaiters.removeAll()
        }
        if !featureWaiters.isEmpty {
            actions.append(.featuresKnown(featureWaiters.map(\.waiter), nil))
            featureWaiters.removeAll()
        }
    }

    /// Asks the broker of the new connection what it takes beyond the framed protocol, naming
    /// the edition this client speaks in the body (edition-2 brokers ignore it; a later one
    /// serves a client that names none by edition 2's rules: docs/protocol.md, "Editions").
    private mutating func askFeatures(now: Duration, into actions: inout [Action]) {
        let id = RequestID(high: requestIDs.next(), low: requestIDs.next())
        featuresAsk = (id, now + table.connectTimeout)
        let header = RequestHeader(
            attempt: 1, timeoutMilliseconds: UInt32(clamping: max(1, table.connectTimeout.wholeMilliseconds)))
        actions.append(
            .send(
                socket: socket,
                .request(
                    TaskRequest(
                        requestID: id, service: BrokerService.features, header: header,
                        body: Self.editionAnnouncement))))
    }

    /// The body of the `mmi.features` question: `edition=N`.
    static let editionAnnouncement = Array(BrokerFeatures.currentEditionLine.utf8)

    /// The broker of this connection answered the question (or its time ran out: `answer` says
    /// nothing new): traced calls carry their frame if it takes one, calls go packed if it
    /// takes them, and the callers waiting for it are resumed. Told also when nobody waits:
    /// the shell keeps the answer for callers that need it without a trip to this thread.
    private mutating func learned(_ answer: BrokerFeatures, into actions: inout [Action]) {
        features = (table.connectionEpoch, answer)
        if answer.takesTrace { table.brokerTakesTrace(epoch: table.connectionEpoch) }
        actions.append(.featuresKnown(featureWaiters.map(\.waiter), answer))
        featureWaiters.removeAll()
    }

    /// An output for the table's actions that writes them into `actions` as the machine's own
    /// (see ``RequestTableOutput``): the list moved into it, not copied. Handed back by
    /// ``tableDone(_:into:)`` once the table's input ran.
    private func tableOutput(taking actions: inout [Action]) -> TableOutput {
        var output = TableOutput(socket: socket, packed: sendsPacked)
        swap(&output.actions, &actions)
        return output
    }

    /// The list back from `output`; a switch of endpoints the table asked for is made now, as
    /// the table's input held the machine while it ran.
    private mutating func tableDone(_ output: inout TableOutput, into actions: inout [Action]) {
        swap(&output.actions, &actions)
        if let index = output.switchTo { switchEndpoint(to: index, into: &actions) }
    }

    /// The table's actions as the machine's: on the socket in use, packed where the broker
    /// takes it.
    private struct TableOutput: RequestTableOutput {
        var actions: [Action] = []
        let socket: Int
        let packed: Bool
        /// The endpoint the table gave up the current one for: switched to by the machine, which
        /// the table's input holds while it runs.
        var switchTo: Int?

        init(socket: Int, packed: Bool) {
            self.socket = socket
            self.packed = packed
        }

        @inline(__always) mutating func append(_ action: consuming RequestTable.Action) {
            switch consume action {
            case .send(let request):
                // Moved into the command: built through `?:`, it copied the request.
                if packed && !request.header.keepIfAbandoned && request.concurrencyKey == nil {
                    actions.append(.send(socket: socket, .packedRequest(consume request)))
                } else {
                    actions.append(.send(socket: socket, .request(consume request)))
                }
            case .cancel(let id): actions.append(.send(socket: socket, .cancel(id)))
            case .succeed(let waiters, let body, let attempts):
                actions.append(.succeed(waiters, body: body, attempts: attempts))
            case .fail(let waiters, let error, let attempts): actions.append(.fail(waiters, error, attempts: attempts))
            case .switchEndpoint(let index): switchTo = index
            }
        }
    }

    /// Closes the socket in use and connects to `endpoints[index]` on a new one, whose first
    /// handshake makes the table send every call again.
    private mutating func switchEndpoint(to index: Int, into actions: inout [Action]) {
        actions.append(
            .log(
                switchedSinceConnected ? .debug : .warning, "broker endpoint unreachable; trying the next",
                ["endpoint": "\(endpoints[endpointIndex])", "next": "\(endpoints[index])"]))
        switchedSinceConnected = true
        actions.append(.close(socket: socket))
        socket += 1
        unreachable.newSocket()
        table.unreachableHint = nil
        endpointIndex = index
        actions.append(.open(socket: socket, endpoint: index))
    }
}
