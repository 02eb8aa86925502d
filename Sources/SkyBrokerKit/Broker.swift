import Logging
import ServiceLifecycle
import SkyJournal
import SkyProtocol
import SkyTracing
import SkyWire
import SkyZMQ
import Tracing

/// The running broker: one I/O thread owning its three sockets, which feeds every batch it
/// reads straight to ``BrokerStateMachine`` and sends the resulting messages before it sleeps
/// again. A message crosses no other thread inside the broker, and one wake-up carries as many
/// messages as were waiting.
///
/// Start it with ``start(configuration:logger:)`` (binding errors surface there, before anything
/// runs), then ``run()`` it, usually inside a `ServiceGroup` that ends it on SIGTERM/SIGINT.
public final class Broker: Service, Sendable {
    /// The endpoints actually bound, with real ports when `*` was asked for.
    public struct Endpoints: Sendable, Equatable {
        public var clients: String
        public var workers: String
        public var events: String
    }

    static let clientsSocket = ZMQEventLoop.SocketID(0, name: "clients")
    static let workersSocket = ZMQEventLoop.SocketID(1, name: "workers")
    static let eventsSocket = ZMQEventLoop.SocketID(2, name: "events")
    static let zapSocket = ZMQEventLoop.SocketID(3, name: "zap")

    public let endpoints: Endpoints
    private let loop: ZMQEventLoop
    private let shell: Shell
    private let logger: Logger
    private let configuration: BrokerConfiguration

    private let journal: (any OpenedJournal)?

    private init(
        loop: ZMQEventLoop, shell: Shell, endpoints: Endpoints, configuration: BrokerConfiguration,
        journal: (any OpenedJournal)?, logger: Logger
    ) {
        self.journal = journal
        self.loop = loop
        self.shell = shell
        self.endpoints = endpoints
        self.logger = logger
        self.configuration = configuration
    }

    /// Binds the three sockets; on a PostgreSQL store another broker holds, waits as a standby
    /// first.
    /// - Parameter stopWaiting: asked while waiting as a standby (a few times a second): `true`
    ///   ends the wait with ``BrokerStoppedWaiting`` (the process was told to stop).
    /// - Throws: ``BrokerStartError`` naming the endpoint that could not be bound and why.
    public static func start(
        configuration: BrokerConfiguration, logger: Logger, stopWaiting: @escaping @Sendable () -> Bool = { false }
    ) async throws -> Broker {
        let guardrails: [ZMQSocketOption] = [
            .sendHighWaterMark(configuration.highWaterMark),
            .receiveHighWaterMark(configuration.receiveHighWaterMark),
            .maxMessageSize(configuration.maxFrameSize),
            .handshakeInterval(milliseconds: configuration.handshakeTimeout),
        ]
        let security = configuration.security
        if let security {
            // Fail early and clearly on an allow-list that cannot be read.
            for (role, path) in security.allowLists.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                do {
                    _ = try CurveKeyFile.readAllowList(path)
                } catch {
                    throw BrokerStartError(role: role.rawValue, endpoint: path, reason: "allow-list: \(error)")
                }
            }
        }
        /// CURVE server options of a role's socket, when the broker runs with keys.
        func curve(_ role: BrokerSecurity.Role) -> [ZMQSocketOption] {
            security?.keys.serverOptions(domain: role.domain) ?? []
        }
        var specs: [ZMQEventLoop.SocketSpec] = []
        if security != nil {
            // The ZAP handler must be bound before any CURVE socket: without it libzmq admits
            // every key. If it cannot be bound (another handler in this context), start fails.
            specs.append(.init(id: zapSocket, type: .router, bind: [ZAPAuthenticator.endpoint]))
        }
        let authenticated = security != nil
        specs += [
            // Clients announce a random 16-byte routing id and keep it across reconnects; handover
            // lets a client whose connection broke come back under it before the broker noticed
            // the break, so the replies for its requests in flight still find it.
            .init(
                id: clientsSocket, type: .router,
                options: guardrails + curve(.client) + [.routerMandatory(true), .routerHandover(true)],
                bind: [configuration.clientsEndpoint], readUserID: authenticated),
            .init(
                id: workersSocket, type: .router, options: guardrails + curve(.worker) + [.routerMandatory(true)],
                bind: [configuration.workersEndpoint], readUserID: authenticated, readPeerAddress: true,
                // The address is recorded from a worker's READY only.
                peerAddressFilter: { BrokerStateMachine.looksLikeReady($0.dropFirst()) }),
            .init(
                id: eventsSocket, type: .xpub, options: guardrails + curve(.watcher) + [.xpubVerbose(true)],
                bind: [configuration.eventsEndpoint], readUserID: authenticated),
        ]
        var routing = configuration.routing
        routing.logsDebug = logger.logLevel <= .debug
        routing.maxFrameSize = configuration.maxFrameSize
        var journal: (any OpenedJournal)?
        if let store = configuration.store {
            journal = try await PostgresJournal.open(
                store, name: PostgresJournal.name(clients: configuration.clientsEndpoint),
                endpoints: [
                    configuration.clientsEndpoint, configuration.workersEndpoint, configuration.eventsEndpoint,
                ],
                takeoverAfter: configuration.takeoverAfter, stop: stopWaiting, logger: logger)
        } else if let directory = configuration.stateDirectory {
            journal = try await StateDirectory.open(directory, logger: logger)
        }
        routing.journal = journal != nil
        routing.epoch = journal?.epoch
        if let epoch = journal?.epoch {
            logger.notice("active on the job store", metadata: ["epoch": "\(epoch)"])
        }
        routing.journalMaxBytes = configuration.journalMaxBytes
        if routing.memoryProbe == nil { routing.memoryProbe = { ProcessMemoryProbe.measure() } }
        let shell = Shell(
            state: Locked(BrokerStateMachine(configuration: routing)),
            authenticator: security.map {
                ThreadConfined(ZAPAuthenticator(security: $0), name: "the ZAP authenticator")
            }, journal: journal?.writer,
            limits: .init(frames: configuration.maxFramesPerMessage, bytes: configuration.maxMessageBytes),
            logger: logger, stallGuard: journal?.stallGuard.map(StallGuard.init), storeAnswers: journal?.storeAnswers)
        let loop: ZMQEventLoop
        // From here on a failure must stop the journal's thread and free its lock.
        do {
            loop = try await ZMQEventLoop.start(
                name: "skybroker-io", sockets: specs, tick: configuration.routing.tickInterval,
                handler: { batch, outbound in shell.handle(&batch, into: &outbound) })
        } catch let error as ZMQEventLoop.SetupError {
            await journal?.close()
            let endpoint = specs.first { $0.id == error.socket }?.bind.first ?? ""
            throw BrokerStartError(role: error.socket.name, endpoint: endpoint, underlying: error.underlying)
        } catch {
            await journal?.close()
            throw error
        }
        let endpoints = Endpoints(
            clients: loop.boundEndpoints(of: clientsSocket).first ?? configuration.clientsEndpoint,
            workers: loop.boundEndpoints(of: workersSocket).first ?? configuration.workersEndpoint,
            events: loop.boundEndpoints(of: eventsSocket).first ?? configuration.eventsEndpoint)
        shell.loop.withLock { $0 = loop }
        shell.state.withLock {
            $0.announce(clients: endpoints.clients, workers: endpoints.workers, events: endpoints.events)
        }
        await journal?.announce(PostgresJournal.name(clients: endpoints.clients))
        if let journal {
            // Jobs unfinished when the broker last stopped are queued again before anyone connects.
            var outbound: [ZMQEventLoop.Outbound] = []
            shell.recover(journal.unfinished, settings: journal.settings, into: &outbound)
            loop.send(outbound)
        }
        return Broker(
            loop: loop, shell: shell, endpoints: endpoints, configuration: configuration, journal: journal,
            logger: logger)
    }

    /// Serves until the surrounding `ServiceGroup` shuts down gracefully or the task is cancelled.
    /// Then it answers every waiting and running request with `brokerShuttingDown`, tells the
    /// workers, lets those messages leave, and closes the sockets.
    /// - Throws: the `JournalError` that ended it when its PostgreSQL store was lost to another
    ///   broker (`fenced`), or it stepped down for a standby (`leaseLapsed`): it then closes its
    ///   sockets without answering or telling anyone, as another broker serves.
    public func run() async throws {
        logger.info(
            "skybroker serving: clients \(endpoints.clients), workers \(endpoints.workers), events \(endpoints.events)")
        if let security = configuration.security {
            let lists = BrokerSecurity.Role.allCases.map { "\($0.rawValue)s \(security.allowLists[$0] ?? "(nobody)")" }
            logger.info(
                "CURVE on: broker public key \(security.keys.publicKey.z85); allowed keys: \(lists.joined(separator: ", "))"
            )
        } else if configuration.bindsLoopbackOnly {
            logger.warning(
                "traffic is neither authenticated nor encrypted (no --secret-key); listening on loopback only")
        } else {
            logger.warning(
                "traffic is neither authenticated nor encrypted (no --secret-key) and the broker listens beyond loopback: anyone who reaches these ports can submit tasks or register as a worker. Use --secret-key and allow-lists (docs/security.md) on any network you do not fully trust."
            )
        }
        // The I/O thread does the serving; this task only waits for the end: a graceful
        // shutdown, or the journal lost to another broker (which stops this one, naming it).
        let lostJournal = await withTaskGroup(of: JournalError?.self) { group in
            group.addTask {
                try? await gracefulShutdown()
                return nil
            }
            if let lost = journal?.lost {
                group.addTask {
                    for await error in lost { return error }
                    return nil
                }
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
        if let lostJournal {
            if case .leaseLapsed = lostJournal {
                logger.error(
                    "the lease went unrenewed while a standby waits; stepping down",
                    metadata: ["error": "\(lostJournal)"])
            } else {
                logger.error(
                    "the job store was lost to another broker; stopping", metadata: ["error": "\(lostJournal)"])
            }
        }
        logger.info("skybroker stopping")
        if lostJournal == nil {
            var outbound: [ZMQEventLoop.Outbound] = []
            shell.shutdown(into: &outbound)
            // The counts of jobs as they end, committed before the journal closes: the next
            // broker counts on from them.
            if let journal, let totals = shell.jobTotals {
                journal.writer.writeWithNextCommit([.totalsSaved(totals)]) { _ in }
            }
            loop.send(outbound)
            await loop.shutdown(linger: configuration.shutdownLinger)
        } else {
            // Another broker serves (or is about to): this one says nothing more. Its clients
            // send their calls again to the next endpoint, its workers register there.
            await loop.shutdown(linger: 0)
        }
        // Writes queued before the end are committed; the lock is freed last. A store that was
        // lost may hang the journal's thread (a server that answers nothing): the broker then
        // ends without waiting for it, having written nothing more.
        if let journal {
            if lostJournal == nil {
                await journal.close()
            } else {
                // Unstructured: a task group would wait for the close it gave up on.
                let (ended, end) = AsyncStream.makeStream(of: Void.self)
                Task {
                    await journal.close()
                    end.finish()
                }
                Task {
                    try? await Task.sleep(for: .seconds(2))
                    end.finish()
                }
                for await _ in ended {}
            }
        }
        logger.info("skybroker stopped")
        if let lostJournal { throw lostJournal }
    }

    /// The current view of the cluster (what `mmi.workers` answers).
    public func snapshot() -> ClusterSnapshot {
        shell.snapshot()
    }

    /// Turns what the I/O thread read into state machine inputs, and its actions into messages.
    /// Runs on the I/O thread; the lock is there for ``snapshot()`` and the shutdown, which come
    /// from other threads.
    struct Shell: Sendable {
        /// What one message may hold.
        struct Limits: Sendable {
            var frames: Int
            var bytes: Int64
        }

        let state: Locked<BrokerStateMachine>
        /// Only with CURVE on; only the I/O thread uses it.
        let authenticator: ThreadConfined<ZAPAuthenticator>?
        /// The job journal's thread, with a state directory.
        let journal: JournalWriter?
        let limits: Limits
        /// The loop that runs the shell, set once it started: ticks read its longest iteration.
        let loop = Locked<ZMQEventLoop?>(nil)
        let logger: Logger
        let memoryReleaser = MemoryReleaser()
        /// Recorded into by actions, which the I/O thread carries out, and also the start's
        /// recovery and the stop, which run on other threads: hence a lock.
        let metrics = Locked(BrokerMetrics())
        /// Each wake-up's actions, in one buffer kept from wake-up to wake-up.
        let spareActions = SpareBuffer<BrokerAction>()
        /// When the last whole tick ran: a tick sooner than the tick interval after it is the
        /// alarm the machine asked for (a rate limit's next token), and does only that.
        let lastFullTick = ThreadConfined<Int64?>(nil, name: "the broker's last whole tick")
        /// The process's tracer, nil without one: traced requests then keep the client's context.
        let tracer = SkyTracing.active()
        /// On a shared job store: stops the broker from serving after a pause (see ``StallGuard``).
        var stallGuard: StallGuard? = nil
        /// On a shared job store: whether it answered lately (``OpenedJournal/storeAnswers``).
        var storeAnswers: (@Sendable () -> Bool)? = nil

        func snapshot() -> ClusterSnapshot {
            let now = MonotonicInstant.now
            return state.withLock { $0.snapshot(now: now) }
        }

        /// The counts of jobs now; nil without a journal.
        var jobTotals: JobTotals? {
            state.withLock { $0.jobTotals }
        }

        func recover(_ records: [JobRecord], settings: JournalSettings, into outbound: inout [ZMQEventLoop.Outbound]) {
            var actions: [BrokerAction] = []
            let now = MonotonicInstant.now
            state.withLock { machine in
                // Paused and limited first: none of a paused service's jobs may start, nor more
                // of a limited one's than its limit.
                machine.pausedAtStart(settings.paused)
                machine.limitsAtStart(settings.limits, now: now, into: &actions)
                machine.totalsAtStart(settings.totals)
                _ = machine.recover(records, now: now, into: &actions)
            }
            execute(&actions, into: &outbound)
        }

        func shutdown(into outbound: inout [ZMQEventLoop.Outbound]) {
            var actions: [BrokerAction] = []
            let now = MonotonicInstant.now
            state.withLock { $0.shutdown(now: now, into: &actions) }
            execute(&actions, into: &outbound)
        }

        func handle(_ batch: inout [ZMQEventLoop.Inbound], into outbound: inout some OutboundSink) {
            if let stallGuard, !stallGuard.mayServe(now: .now) {
                batch.removeAll(keepingCapacity: true)
                return
            }
            var actions = spareActions.take()
            actions.reserveCapacity(batch.count * 2)
            let now = MonotonicInstant.now
            // A rate limit's next token, if work waits for one: the loop wakes then.
            let wake = state.withLock { machine in
                // Each message moved out of the batch, not copied (see `takeEach`).
                batch.takeEach(leaving: .tick) { inbound in
                    switch consume inbound {
                    case .message(Broker.zapSocket, let message):
                        authenticate(message, machine: &machine, into: &outbound, actions: &actions)
                    case .message(Broker.clientsSocket, var message):
                        guard admit(message, as: .client, machine: &machine, actions: &actions) else { return }
                        let peer = message.takeRoutingID()
                        machine.clientMessage(from: peer, message: message.content, now: now, into: &actions)
                    case .message(Broker.workersSocket, var message):
                        guard admit(message, as: .worker, machine: &machine, actions: &actions) else { return }
                        let peer = message.takeRoutingID()
                        machine.workerMessage(
                            from: peer, message: message.content, host: message.peerAddress, key: message.userID,
                            now: now, into: &actions)
                    case .message(Broker.eventsSocket, let message):
                        guard admit(message, as: .watcher, machine: &machine, actions: &actions) else { return }
                        // XPUB: [0x01 topic] subscribes, [0x00 topic] unsubscribes.
                        guard message.content.count > 0, let first = message.content[0].first, first <= 1 else {
                            return
                        }
                        machine.eventSubscription(Array(message.content[0].dropFirst()), subscribed: first == 1)
                        if first == 1 { machine.subscriberJoined(now: now, into: &actions) }
                    case .sendFailed(Broker.clientsSocket, let frames, _):
                        if let peer = frames.first {
                            machine.clientUnreachable(
                                PeerID(peer), frames: Frames(Array(frames.dropFirst())), now: now, into: &actions)
                        }
                    case .sendFailed(Broker.workersSocket, let frames, _):
                        if let peer = frames.first {
                            machine.workerUnreachable(PeerID(peer), now: now, into: &actions)
                        }
                    case .sendFailed(let socket, _, let error):
                        actions.append(.log(.warning, "send on \(socket) failed: \(error)"))
                    case .tick:
                        let interval = BrokerStateMachine.nanoseconds(machine.configuration.tickInterval)
                        let full = lastFullTick.withValue { last in
                            if let last, !machine.hasExpiryBacklog,
                                now.nanoseconds(since: MonotonicInstant(nanoseconds: last)) < interval / 10 * 9
                            {
                                return false
                            }
                            last = now.nanoseconds
                            return true
                        }
                        guard full else {
                            machine.rateWake(now: now, into: &actions)
                            return
                        }
                        let loop = loop.withLock { $0 }
                        if let loop { machine.loopIteration(took: loop.takeLongestIteration()) }
                        // At each tick, not each wake-up: the hold starts 1.5 s into a silence, and
                        // a tick's tenth of a second later is no matter.
                        if let storeAnswers { machine.storeAnswering(storeAnswers(), now: now, into: &actions) }
                        machine.tick(now: now, into: &actions)
                        let descriptors = DescriptorProbe.check()
                        machine.descriptorsChecked(
                            exhausted: descriptors.exhausted, limit: descriptors.limit, now: now, into: &actions)
                        if machine.hasExpiryBacklog { loop?.tickSoon() }
                    case .input(let input):
                        if let answer = input as? JournalAnswer {
                            machine.journalAnswered(answer, now: now, into: &actions)
                        }
                    case .message, .monitor, .opened:
                        return
                    }
                }
                return machine.nextRateWake
            }
            if let wake { loop.withLock { $0 }?.setAlarm(.zero, after: wake.nanoseconds) }
            execute(&actions, into: &outbound)
            spareActions.giveBack(&actions)
        }

        /// Whether a message may reach the state machine: within the limits, and, with CURVE
        /// on, from a peer authenticated for the socket's role. Fails closed: a message without
        /// a User-Id (which libzmq would let through if the ZAP handler were missing) is dropped.
        private func admit(
            _ message: ZMQMessage, as role: BrokerSecurity.Role, machine: inout BrokerStateMachine,
            actions: inout [BrokerAction]
        ) -> Bool {
            guard !message.content.isEmpty else { return false }
            // The routing-id frame is the ROUTER's, not the peer's; the limits count the rest.
            let frames = message.content.count - (role == .watcher ? 0 : 1)
            let bytes = Int64(message.byteCount)
            // A READY names up to 1,024 services: the workers port takes that many frames.
            let frameLimit = role == .worker ? max(limits.frames, WorkerToBroker.maxReadyFrames) : limits.frames
            if frames > frameLimit || bytes > limits.bytes {
                machine.dropped(
                    .oversized(
                        port: role.rawValue, frames: frames, bytes: bytes, frameLimit: frameLimit,
                        byteLimit: limits.bytes), now: MonotonicInstant.now, into: &actions)
                if role == .worker, BrokerStateMachine.looksLikeReady(message.content.dropFirst()) {
                    machine.refuseRegistration(
                        PeerID(message.content[0]),
                        reason:
                            "READY of \(frames) frames and \(bytes) bytes is over the broker's limits (at most \(WorkerToBroker.maxServices) services, \(limits.bytes) bytes)",
                        now: MonotonicInstant.now, into: &actions)
                }
                return false
            }
            if authenticator != nil, !(message.userID?.hasPrefix(role.userIDPrefix) ?? false) {
                machine.dropped(.unauthenticated(port: role.rawValue), now: MonotonicInstant.now, into: &actions)
                return false
            }
            return true
        }

        /// Answers libzmq's ZAP request for a connecting CURVE peer.
        private func authenticate(
            _ message: ZMQMessage, machine: inout BrokerStateMachine, into outbound: inout some OutboundSink,
            actions: inout [BrokerAction]
        ) {
            let answered = authenticator?.withValue { authenticator in
                authenticator.answer(message.frames).map { ($0.reply, $0.decision, authenticator.lastError) }
            }
            guard let (reply, decision, listError) = answered ?? nil else { return }
            outbound.append(.init(socket: Broker.zapSocket, frames: reply))
            if case .denied(let reason) = decision {
                machine.dropped(.handshakeDenied(reason: reason), now: MonotonicInstant.now, into: &actions)
            }
            if let listError { actions.append(.log(.warning, "allow-list unreadable, admitting nobody: \(listError)")) }
        }

        private func execute(_ actions: inout [BrokerAction], into outbound: inout some OutboundSink) {
            // Each action moved out, not copied; `.releaseMemory` (no payload) is left in its place.
            actions.takeEach(leaving: .releaseMemory) { carryOut($0, into: &outbound) }
        }

        /// Carries out one action, taken out of the machine's list and destroyed after this
        /// returns. Borrowed, not consumed: a `switch consume` made the compiler copy each
        /// payload it bound (a request's or a reply's references counted up and down) before it
        /// destroyed the action; bound from a borrowed action, they are borrowed too.
        private func carryOut(_ action: BrokerAction, into outbound: inout some OutboundSink) {
            switch action {
            case .sendToClient(let peer, .packedReply(let reply)):
                // Taken out of the action as it is destructured: lending it from the command
                // copied it out (see `BrokerToClient.lendPackedReply`).
                Self.sendPacked(reply, to: peer, into: &outbound)
            case .sendToClient(let peer, let command):
                peer.withBytes { routingID in
                    outbound.append(.init(socket: Broker.clientsSocket, message: command.frames(routedTo: routingID)))
                }
            case .sendToWorker(let peer, .packedRequest(let tag, let request)):
                Self.sendPacked(tag, request, to: peer, into: &outbound)
            case .sendToWorker(let peer, let command):
                peer.withBytes { routingID in
                    outbound.append(.init(socket: Broker.workersSocket, message: command.frames(routedTo: routingID)))
                }
            case .sendTraced(let peer, let tag, var request, let dispatch):
                if let tracer { request.trace = Self.span(request, dispatch, tracer) ?? request.trace }
                if dispatch.packed {
                    Self.sendPacked(tag, request, to: peer, into: &outbound)
                } else {
                    peer.withBytes { routingID in
                        let command = BrokerToWorker.request(tag: tag, request)
                        outbound.append(
                            .init(socket: Broker.workersSocket, message: command.frames(routedTo: routingID)))
                    }
                }
            case .sendRaw(.clients, let peer, let frames):
                outbound.append(.init(socket: Broker.clientsSocket, frames: [peer.bytes] + frames))
            case .sendRaw(.workers, let peer, let frames):
                outbound.append(.init(socket: Broker.workersSocket, frames: [peer.bytes] + frames))
            case .publish(var event):
                if let stats = event.stats {
                    let commits = journal?.commits
                    metrics.withLock { $0.record(stats, journalCommits: commits) }
                }
                event.time = SkyEvent.timestamp()
                outbound.append(.init(socket: Broker.eventsSocket, frames: event.encodeFrames()))
            case .journal(let work):
                perform(work)
            case .serviceWindows(let windows):
                metrics.withLock { $0.record(windows) }
            case .releaseMemory:
                memoryReleaser.release()
            case .log(let level, let message, let fields):
                let metadata = fields.isEmpty ? nil : fields.mapValues { Logger.MetadataValue.string($0) }
                switch level {
                case .debug: logger.debug("\(message)", metadata: metadata)
                case .info: logger.info("\(message)", metadata: metadata)
                case .warning: logger.warning("\(message)", metadata: metadata)
                }
            }
        }
    }
}

extension Broker.Shell {
    /// A packed REPLY to a client, lent from its parts. A function of its own because a
    /// closure here that captured the action's binding copied the reply; a parameter it only
    /// borrows.
    fileprivate static func sendPacked(_ reply: TaskReply, to peer: PeerID, into outbound: inout some OutboundSink) {
        peer.withBytes { routingID in
            BrokerToClient.lendPackedReply(
                reply.requestID, attempt: reply.attempt, reply.status, body: reply.bodyBytes, routedTo: routingID
            ) {
                outbound.send(socket: Broker.clientsSocket, parts: $0)
            }
        }
    }

    /// A packed REQUEST to a worker, lent from its parts.
    fileprivate static func sendPacked(
        _ tag: DeliveryTag, _ request: TaskRequest, to peer: PeerID, into outbound: inout some OutboundSink
    ) {
        peer.withBytes { routingID in
            BrokerToWorker.lendPackedRequest(tag: tag, request, routedTo: routingID) {
                outbound.send(socket: Broker.workersSocket, parts: $0)
            }
        }
    }

    /// The broker's span of a traced request, from its arrival to its delivery (queue wait and
    /// dispatch), as a child of the client's; returns the span's context for the worker.
    fileprivate static func span(_ request: TaskRequest, _ dispatch: TracedDispatch, _ tracer: some Tracer) -> [UInt8]?
    {
        let parent = SkyTracing.context(from: request.trace, tracer: tracer)
        let end = DefaultTracerClock.now
        let waited = UInt64(clamping: dispatch.waitedNanoseconds)
        let start = DefaultTracerClock.Timestamp(
            nanosecondsSinceEpoch: end.nanosecondsSinceEpoch - min(waited, end.nanosecondsSinceEpoch))
        let span = tracer.startSpan("sky.dispatch \(request.service)", context: parent, ofKind: .internal, at: start)
        span.attributes[SkyTracing.Attribute.system] = "sky"
        span.attributes[SkyTracing.Attribute.service] = request.service
        span.attributes[SkyTracing.Attribute.requestID] = request.requestID.description
        span.attributes[SkyTracing.Attribute.worker] = dispatch.worker
        span.attributes[SkyTracing.Attribute.delivery] = Int(dispatch.delivery)
        span.attributes[SkyTracing.Attribute.queueWaitMilliseconds] = Double(waited) / 1_000_000
        let frame = SkyTracing.frame(for: span.context, tracer: tracer, base: request.trace)
        span.end(at: end)
        return frame
    }

    /// Hands work to the journal's thread; its answer comes back to the I/O thread as an input.
    fileprivate func perform(_ work: JournalWork) {
        guard let journal, let loop = loop.withLock({ $0 }) else { return }
        switch work {
        case .write(let changes, let purpose):
            journal.write(changes) { result in _ = loop.post(input: JournalAnswer.written(purpose, result)) }
        case .writeWithNextCommit(let changes, let purpose):
            journal.writeWithNextCommit(changes) { result in
                _ = loop.post(input: JournalAnswer.written(purpose, result))
            }
        case .flush:
            journal.flush()
        case .lookup(let id, let caller, let retry):
            journal.read { store in
                let found = Result { () throws(JournalError) in try store.job(id.bytes) }
                _ = loop.post(input: JournalAnswer.lookedUp(id, caller, retry: retry, found))
            }
        case .describe(let id, let caller):
            journal.read { store in
                let found = Result { () throws(JournalError) in
                    (
                        record: try store.job(id.bytes),
                        retriedAs: try store.job(idempotencyKey: JobScheduler.retryKeyPrefix + id.description)
                    )
                }
                _ = loop.post(input: JournalAnswer.described(id, caller, found))
            }
        case .list(let state, let service, let limit, let caller):
            journal.read { store in
                let found = Result { () throws(JournalError) in
                    (
                        jobs: try store.list(state: state, service: service, limit: limit),
                        matched: try store.count(state: state, service: service, atMost: JobListing.countedAtMost)
                    )
                }
                _ = loop.post(input: JournalAnswer.listed(caller, found))
            }
        case .select(let selection, let errorType, let caller):
            journal.read { store in
                let found = Result { () throws(JournalError) in
                    try BulkSelection.select(selection, errorType: errorType, from: store)
                }
                _ = loop.post(input: JournalAnswer.selected(caller, found))
            }
        case .read(let ids):
            journal.read { store in
                let found = Result { () throws(JournalError) in try BulkRead.read(ids, from: store) }
                _ = loop.post(input: JournalAnswer.read(found))
            }
        case .maintain(let now, let limit, let totals):
            journal.read { store in
                let measured = Result { () throws(JournalError) -> (bytes: Int, deleted: Int) in
                    if let totals { try store.apply([.totalsSaved(totals)]) }
                    let deleted = try store.deleteExpired(before: now, limit: limit)
                    return (try store.byteCount(), deleted)
                }
                _ = loop.post(input: JournalAnswer.maintained(measured))
            }
        case .loadSchedules:
            journal.read { store in
                let found = Result { () throws(JournalError) in try store.schedules() }
                _ = loop.post(input: JournalAnswer.schedulesLoaded(found))
            }
        case .loadFlow(let id, let keys):
            journal.read { store in
                let found = Result { () throws(JournalError) in try store.jobs(idempotencyKeys: keys) }
                _ = loop.post(input: JournalAnswer.flowLoaded(id, found))
            }
        case .readFlow(let id, let caller):
            journal.read { store in
                let found = Result { () throws(JournalError) -> FlowRead in
                    let record = try store.job(id.bytes)
                    guard let record, record.service == FlowSpec.service,
                        let spec = try? FlowSpec(decoding: record.body)
                    else { return JobScheduler.readFlow(id, record: record, steps: []) }
                    let steps = try store.jobs(idempotencyKeys: JobScheduler.stepKeys(id, spec))
                    return JobScheduler.readFlow(id, record: record, steps: steps)
                }
                _ = loop.post(input: JournalAnswer.flowRead(id, caller, found))
            }
        }
    }
}

/// The broker was told to stop while it waited as a standby: it never served, and left the
/// store's list of waiting standbys.
public struct BrokerStoppedWaiting: Error, CustomStringConvertible {
    /// The store, without its password.
    public let store: String

    public var description: String { JournalError.stoppedWaiting(store: store).description }
}

/// The broker could not bind one of its endpoints, or cannot read its keys.
public struct BrokerStartError: Error, CustomStringConvertible {
    public let role: String
    public let endpoint: String
    package let underlying: ZMQError?
    public let reason: String?

    init(role: String, endpoint: String, underlying: ZMQError) {
        self.role = role
        self.endpoint = endpoint
        self.underlying = underlying
        reason = nil
    }

    init(role: String, endpoint: String, reason: String) {
        self.role = role
        self.endpoint = endpoint
        underlying = nil
        self.reason = reason
    }

    public var description: String {
        guard let underlying else {
            // The journal's reasons are whole sentences naming the file.
            return role == "journal" ? reason ?? "" : "cannot start the \(role) side: \(reason ?? "")"
        }
        if role == "zap" {
            return
                "cannot start the ZAP authentication handler at \(endpoint): \(underlying.message). Without it CURVE would admit any key, so the broker does not start."
        }
        let text = "cannot bind the \(role) endpoint \(endpoint): \(underlying.message)"
        return underlying.bindAdvice.map { "\(text). \($0) (--\(role))." } ?? text
    }
}

extension ZMQMessage {
    /// A ROUTER's routing id (the first frame, which ``Broker/Shell`` has admitted as there),
    /// read in place and hidden: no view of it, and no second `Frames` of the rest.
    fileprivate mutating func takeRoutingID() -> PeerID {
        let peer = content.withFrame(0) { PeerID($0) }
        content.removeFirst()
        return peer
    }
}
