import Logging
import ServiceLifecycle
import SkyProtocol
import SkyZMQ

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

    public let endpoints: Endpoints
    private let loop: ZMQEventLoop
    private let shell: Shell
    private let logger: Logger
    private let configuration: BrokerConfiguration

    private init(
        loop: ZMQEventLoop, shell: Shell, endpoints: Endpoints, configuration: BrokerConfiguration, logger: Logger
    ) {
        self.loop = loop
        self.shell = shell
        self.endpoints = endpoints
        self.logger = logger
        self.configuration = configuration
    }

    /// Binds the three sockets.
    /// - Throws: ``BrokerStartError`` naming the endpoint that could not be bound and why.
    public static func start(configuration: BrokerConfiguration, logger: Logger) async throws -> Broker {
        let guardrails: [ZMQSocketOption] = [
            .sendHighWaterMark(configuration.highWaterMark),
            .receiveHighWaterMark(configuration.receiveHighWaterMark),
            .maxMessageSize(configuration.maxFrameSize),
        ]
        let specs: [ZMQEventLoop.SocketSpec] = [
            // Clients announce a random 16-byte routing id and keep it across reconnects; handover
            // lets a client whose connection broke come back under it before the broker noticed
            // the break, so the replies for its requests in flight still find it.
            .init(
                id: clientsSocket, type: .router,
                options: guardrails + [.routerMandatory(true), .routerHandover(true)],
                bind: [configuration.clientsEndpoint]),
            .init(
                id: workersSocket, type: .router, options: guardrails + [.routerMandatory(true)],
                bind: [configuration.workersEndpoint], readPeerAddress: true),
            .init(
                id: eventsSocket, type: .xpub, options: guardrails + [.xpubVerbose(true)],
                bind: [configuration.eventsEndpoint]),
        ]
        var routing = configuration.routing
        if routing.memoryProbe == nil { routing.memoryProbe = { ProcessMemoryProbe.measure() } }
        let shell = Shell(state: Locked(BrokerStateMachine(configuration: routing)), logger: logger)
        let loop: ZMQEventLoop
        do {
            // Ticks drive expiry, heartbeats, deadlines and stats; a tenth of the heartbeat
            // interval keeps detection within 10 % of the configured times.
            let tick = max(.milliseconds(10), configuration.routing.heartbeatInterval / 10)
            loop = try await ZMQEventLoop.start(
                name: "skybroker-io", sockets: specs, tick: tick,
                handler: { batch, outbound in shell.handle(batch, into: &outbound) })
        } catch let error as ZMQEventLoop.SetupError {
            let endpoint = specs.first { $0.id == error.socket }?.bind.first ?? ""
            throw BrokerStartError(role: error.socket.name, endpoint: endpoint, underlying: error.underlying)
        }
        let endpoints = Endpoints(
            clients: loop.boundEndpoints(of: clientsSocket).first ?? configuration.clientsEndpoint,
            workers: loop.boundEndpoints(of: workersSocket).first ?? configuration.workersEndpoint,
            events: loop.boundEndpoints(of: eventsSocket).first ?? configuration.eventsEndpoint)
        return Broker(loop: loop, shell: shell, endpoints: endpoints, configuration: configuration, logger: logger)
    }

    /// Serves until the surrounding `ServiceGroup` shuts down gracefully or the task is cancelled.
    /// Then it answers every waiting and running request with `brokerShuttingDown`, tells the
    /// workers, lets those messages leave, and closes the sockets.
    public func run() async throws {
        logger.info(
            "skybroker serving: clients \(endpoints.clients), workers \(endpoints.workers), events \(endpoints.events)")
        // The I/O thread does the serving; this task only waits for the end.
        try? await gracefulShutdown()
        logger.info("skybroker stopping")
        var outbound: [ZMQEventLoop.Outbound] = []
        shell.shutdown(into: &outbound)
        loop.send(outbound)
        await loop.shutdown(linger: configuration.shutdownLinger)
        logger.info("skybroker stopped")
    }

    /// The current view of the cluster (what `mmi.workers` answers).
    public func snapshot() -> ClusterSnapshot {
        shell.snapshot()
    }

    /// Turns what the I/O thread read into state machine inputs, and its actions into messages.
    /// Runs on the I/O thread; the lock is there for ``snapshot()`` and the shutdown, which come
    /// from other threads.
    struct Shell: Sendable {
        let state: Locked<BrokerStateMachine>
        let logger: Logger
        let clock = ContinuousClock()

        func snapshot() -> ClusterSnapshot {
            let now = clock.now
            return state.withLock { $0.snapshot(now: now) }
        }

        func shutdown(into outbound: inout [ZMQEventLoop.Outbound]) {
            var actions: [BrokerAction] = []
            let now = clock.now
            state.withLock { $0.shutdown(now: now, into: &actions) }
            execute(actions, into: &outbound)
        }

        func handle(_ batch: [ZMQEventLoop.Inbound], into outbound: inout [ZMQEventLoop.Outbound]) {
            var actions: [BrokerAction] = []
            actions.reserveCapacity(batch.count * 2)
            let now = clock.now
            state.withLock { machine in
                for inbound in batch {
                    switch inbound {
                    case .message(Broker.clientsSocket, let message):
                        guard message.frames.count >= 1 else { continue }
                        machine.clientMessage(
                            from: PeerID(message.frames[0]), frames: Array(message.frames.dropFirst()), now: now,
                            into: &actions)
                    case .message(Broker.workersSocket, let message):
                        guard message.frames.count >= 1 else { continue }
                        machine.workerMessage(
                            from: PeerID(message.frames[0]), frames: Array(message.frames.dropFirst()),
                            host: message.peerAddress, now: now, into: &actions)
                    case .message(Broker.eventsSocket, let message):
                        // XPUB: [0x01 topic] subscribes, [0x00 topic] unsubscribes.
                        if message.frames.first?.first == 1 { machine.subscriberJoined(into: &actions) }
                    case .sendFailed(Broker.clientsSocket, let frames, _):
                        if let peer = frames.first { machine.clientUnreachable(PeerID(peer), into: &actions) }
                    case .sendFailed(Broker.workersSocket, let frames, _):
                        if let peer = frames.first {
                            machine.workerUnreachable(PeerID(peer), now: now, into: &actions)
                        }
                    case .sendFailed(let socket, _, let error):
                        actions.append(.log(.warning, "send on \(socket) failed: \(error)"))
                    case .tick:
                        machine.tick(now: now, into: &actions)
                    case .message, .monitor:
                        continue
                    }
                }
            }
            execute(actions, into: &outbound)
        }

        private func execute(_ actions: [BrokerAction], into outbound: inout [ZMQEventLoop.Outbound]) {
            for action in actions {
                switch action {
                case .sendToClient(let peer, let command):
                    outbound.append(.init(socket: Broker.clientsSocket, frames: [peer.bytes] + command.encode()))
                case .sendToWorker(let peer, let command):
                    outbound.append(.init(socket: Broker.workersSocket, frames: [peer.bytes] + command.encode()))
                case .publish(var event):
                    event.time = SkyEvent.timestamp()
                    outbound.append(.init(socket: Broker.eventsSocket, frames: event.encodeFrames()))
                case .log(.debug, let line): logger.debug("\(line)")
                case .log(.info, let line): logger.info("\(line)")
                case .log(.warning, let line): logger.warning("\(line)")
                }
            }
        }
    }
}

/// The broker could not bind one of its endpoints.
public struct BrokerStartError: Error, CustomStringConvertible {
    public let role: String
    public let endpoint: String
    public let underlying: ZMQError

    public var description: String {
        var text = "cannot bind the \(role) endpoint \(endpoint): \(underlying.message)"
        if underlying.isAddressInUse {
            text += ". Another process (another skybroker?) uses it; stop it or pick another endpoint with --\(role)."
        }
        return text
    }
}
