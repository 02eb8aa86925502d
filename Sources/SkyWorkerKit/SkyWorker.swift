import Foundation
import Logging
import ServiceLifecycle
import SkyProtocol
import SkyZMQ

/// Connects a ``ScanSystem`` to a broker: announces its name, capacity and services, runs every
/// task the broker sends, and returns the replies.
///
/// One I/O thread owns the DEALER socket and sends the heartbeats itself, so they keep flowing
/// however busy the handlers keep the cooperative pool. The broker's own heartbeats feed a
/// ``BrokerLiveness``: when the broker falls silent the worker reconnects with backoff and
/// registers again; when the broker says DISCONNECT (it restarted and does not know this
/// worker) it registers again at once.
///
/// On graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`) it tells the broker DRAINING
/// (no new tasks), starts no new work, lets the tasks it runs finish and reply for up to
/// ``Configuration/drainGrace``, says DISCONNECT, and closes. Tasks still running then are
/// cancelled and not answered: on DISCONNECT the broker gives them to another worker.
public final class SkyWorker: Service, Sendable {
    public struct Configuration: Sendable {
        /// The broker's workers endpoint.
        public var broker: String
        /// Heartbeats, liveness and reconnect backoff.
        public var liveness: BrokerLiveness.Configuration
        /// How long a graceful stop waits for running tasks.
        public var drainGrace: Duration
        /// CURVE: the broker's public key and this worker's key pair (on the broker's worker
        /// allow-list). Required by a broker that runs with `--secret-key`.
        public var credentials: CurveCredentials?
        /// Called once the worker's socket is open and its READY is on the way (skyworker prints
        /// its ready line here, so that a line means the worker really started).
        public var onStarted: (@Sendable () -> Void)?

        public init(
            broker: String = "tcp://127.0.0.1:5556", liveness: BrokerLiveness.Configuration = .init(),
            drainGrace: Duration = .seconds(30), credentials: CurveCredentials? = nil
        ) {
            self.broker = broker
            self.liveness = liveness
            self.drainGrace = drainGrace
            self.credentials = credentials
        }
    }

    private let configuration: Configuration
    private let system: ScanSystem
    private let logger: Logger
    private let socketCounter = Locked(0)
    private let clock = ContinuousClock()

    public init(configuration: Configuration, system: ScanSystem, logger: Logger) {
        self.configuration = configuration
        self.system = system
        self.logger = logger
    }

    /// A default worker name: host name and process id.
    public static var defaultName: String {
        "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
    }

    public func run() async throws {
        let services = await system.services
        guard !services.isEmpty else { throw WorkerSetupError.noServices }
        let ready = WorkerToBroker.ready(
            WorkerAnnouncement(name: system.name, capacity: UInt32(system.capacity), services: services))
        let tick = max(.milliseconds(10), configuration.liveness.heartbeatInterval / 10)
        let loop = try await ZMQEventLoop.start(name: "skyworker-io", sockets: [], tick: tick)
        // Replies go out on the connection that is current when they are ready: a reply for a task
        // from an earlier connection then reaches the broker, which drops and counts it.
        let current: Locked<ZMQEventLoop.SocketID>
        do {
            current = Locked(try await connect(on: loop, ready: ready))
        } catch {
            await loop.shutdown()
            throw error
        }
        configuration.onStarted?()
        var liveness = BrokerLiveness(configuration: configuration.liveness, now: clock.now)
        let registry = InFlightRegistry()
        logger.info(
            "worker \(system.name) registering with \(configuration.broker): capacity \(system.capacity), services \(services.joined(separator: ", "))"
        )

        let stopRequested = Locked(false)
        /// Set when the broker refused this worker: the reason it stops with.
        var refusal: String?
        var drainDeadline: ContinuousClock.Instant?
        // Set when the broker acknowledged DRAINING (no task comes after that) or is gone.
        var nothingMoreComing = false
        await withGracefulShutdownHandler {
            batches: for await batch in loop.inbound {
                let now = clock.now
                if stopRequested.withLock({ $0 }) {
                    if drainDeadline == nil {
                        drainDeadline = now + configuration.drainGrace
                        loop.send(WorkerToBroker.draining.encode(), on: current.withLock { $0 })
                        logger.info(
                            "worker \(system.name) stopping: finishing \(registry.count) task(s), for at most \(configuration.drainGrace)"
                        )
                    }
                    if nothingMoreComing && registry.count == 0 { break batches }
                    if let deadline = drainDeadline, now >= deadline {
                        registry.abandonAll()
                        logger.warning(
                            "worker \(system.name): \(registry.count) task(s) unfinished after \(configuration.drainGrace); the broker will run them elsewhere"
                        )
                        break batches
                    }
                }
                for inbound in batch {
                    switch inbound {
                    case .message(let from, let message):
                        // Messages on a connection already replaced are ignored.
                        guard from == current.withLock({ $0 }) else { continue }
                        liveness.heard(now: now)
                        let command: BrokerToWorker
                        do {
                            command = try BrokerToWorker.decode(message.frames)
                        } catch {
                            logger.warning("dropped malformed message from the broker: \(error)")
                            continue
                        }
                        switch command {
                        case .request(let tag, let request):
                            // Also while draining: the broker sent it before it saw DRAINING.
                            logger.debug(
                                "running task",
                                metadata: ["service": "\(request.service)", "request": "\(request.requestID)"])
                            run(request, tag: tag, replyingOn: current, loop: loop, registry: registry)
                        case .drainingAcknowledged:
                            nothingMoreComing = true
                        case .refused(let reason):
                            // Registering again would be refused the same way: stop, and say why.
                            refusal = reason
                            registry.abandonAll()
                            break batches
                        case .cancel(let tag, let requestID):
                            let found = registry.cancel(.init(tag: tag, requestID: requestID))
                            logger.debug(
                                "broker cancelled task",
                                metadata: ["request": "\(requestID)", "runningHere": "\(found)"])
                        case .heartbeat:
                            continue
                        case .disconnect:
                            // Draining: the broker no longer holds our tasks; registering again
                            // would only attract new work. Leave.
                            guard drainDeadline == nil else { break batches }
                            logger.warning("the broker does not know this worker (did it restart?); registering again")
                            _ = liveness.brokerDisconnected(now: now)
                            await reconnect(current, on: loop, ready: ready)
                        }
                    case .tick:
                        switch liveness.tick(now: now) {
                        case .disconnect(let reconnectAt):
                            // Stay on the old connection, heartbeating, until then: a broker that
                            // comes back answers the heartbeat with DISCONNECT, and the worker
                            // registers at once. A draining worker expects nothing more.
                            if drainDeadline != nil { nothingMoreComing = true }
                            let wait = now.duration(to: reconnectAt)
                            logger.warning(
                                "no word from the broker for \(configuration.liveness.expiry); reconnecting in \(wait.formatted(.units(allowed: [.seconds, .milliseconds], width: .narrow)))"
                            )
                        case .connect:
                            // Draining without a broker: nobody will take the results. Leave.
                            guard drainDeadline == nil else { break batches }
                            await reconnect(current, on: loop, ready: ready)
                        case nil:
                            continue
                        }
                    case .sendFailed, .monitor:
                        continue
                    }
                }
            }
        } onGracefulShutdown: {
            // Acted on at the next batch; ticks arrive every tenth of a heartbeat interval.
            stopRequested.withLock { $0 = true }
        }

        if let refusal {
            await loop.shutdown(linger: 0)
            logger.error("the broker refused this worker", metadata: ["reason": "\(refusal)"])
            throw WorkerSetupError.refused(refusal)
        }
        loop.send(WorkerToBroker.disconnect.encode(), on: current.withLock { $0 })
        // Let the last replies and the DISCONNECT leave before the sockets go.
        await loop.shutdown(linger: 2000)
        logger.info("worker \(system.name) disconnected")
    }

    private func run(
        _ request: TaskRequest, tag: [UInt8], replyingOn current: Locked<ZMQEventLoop.SocketID>,
        loop: ZMQEventLoop, registry: InFlightRegistry
    ) {
        let system = self.system
        registry.start(.init(tag: tag, requestID: request.requestID)) {
            let reply = await system.execute(request)
            // After an abandoned drain the broker runs the task elsewhere: no reply then.
            guard registry.mayReply else { return }
            loop.send(WorkerToBroker.reply(tag: tag, reply).encode(), on: current.withLock { $0 })
        }
    }

    /// Registers again on a new connection, then closes the old one.
    private func reconnect(_ current: Locked<ZMQEventLoop.SocketID>, on loop: ZMQEventLoop, ready: WorkerToBroker) async
    {
        do {
            let fresh = try await connect(on: loop, ready: ready)
            let old = current.withLock { socket -> ZMQEventLoop.SocketID in
                defer { socket = fresh }
                return socket
            }
            loop.close(old, linger: 0)
        } catch {
            logger.error("cannot open a new connection to \(configuration.broker): \(error)")
        }
    }

    /// Opens a new connection to the broker, registers, and starts heartbeating on it.
    private func connect(on loop: ZMQEventLoop, ready: WorkerToBroker) async throws -> ZMQEventLoop.SocketID {
        let number = socketCounter.withLock { counter -> Int in
            counter += 1
            return counter
        }
        let id = ZMQEventLoop.SocketID(number, name: "broker-\(number)")
        try await loop.open(
            .init(
                id: id, type: .dealer,
                options: [
                    .sendHighWaterMark(100_000), .receiveHighWaterMark(100_000),
                    .reconnectInterval(milliseconds: 250), .reconnectIntervalMax(milliseconds: 4000),
                ] + (configuration.credentials?.socketOptions ?? []),
                connect: [configuration.broker]))
        loop.send(ready.encode(), on: id)
        loop.sendPeriodically(
            WorkerToBroker.heartbeat.encode(), on: id, every: configuration.liveness.heartbeatInterval)
        return id
    }
}

public enum WorkerSetupError: Error, CustomStringConvertible {
    case noServices
    /// The broker refused to register this worker (REFUSED), for the reason given.
    case refused(String)

    public var description: String {
        switch self {
        case .noServices: "the worker has no services: register at least one handler before running it"
        case .refused(let reason): "the broker refused this worker: \(reason)"
        }
    }
}
