import Foundation
import Logging
import ServiceLifecycle
import SkyProtocol
import SkyZMQ

/// Connects a ``ScanSystem`` to a broker: announces its name, capacity and services, runs every
/// task the broker sends, and returns the replies.
///
/// One I/O thread owns the DEALER socket; each task runs as a child task that hands its reply
/// back to that thread. On graceful shutdown (SIGTERM/SIGINT through a `ServiceGroup`) it stops
/// reading new work, lets the tasks it is running finish and reply, says DISCONNECT, and closes.
public final class SkyWorker: Service, Sendable {
    public struct Configuration: Sendable {
        /// The broker's workers endpoint.
        public var broker: String

        public init(broker: String = "tcp://127.0.0.1:5556") {
            self.broker = broker
        }
    }

    private let configuration: Configuration
    private let system: ScanSystem
    private let logger: Logger
    private let socketCounter = Locked(0)

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
        let loop = try await ZMQEventLoop.start(name: "skyworker-io", sockets: [])
        var socket = try await openBrokerSocket(on: loop)
        let ready = WorkerToBroker.ready(
            WorkerAnnouncement(name: system.name, capacity: UInt32(system.capacity), services: services))
        loop.send(ready.encode(), on: socket)
        logger.info(
            "worker \(system.name) registering with \(configuration.broker): capacity \(system.capacity), services \(services.joined(separator: ", "))"
        )

        await withDiscardingTaskGroup { group in
            for await batch in loop.inbound.cancelOnGracefulShutdown() {
                for inbound in batch {
                    guard case .message(let from, let message) = inbound else { continue }
                    let command: BrokerToWorker
                    do {
                        command = try BrokerToWorker.decode(message.frames)
                    } catch {
                        logger.warning("dropped malformed message from the broker: \(error)")
                        continue
                    }
                    switch command {
                    case .request(let client, let request):
                        let system = self.system
                        group.addTask {
                            let reply = await system.execute(request)
                            loop.send(WorkerToBroker.reply(client: client, reply).encode(), on: from)
                        }
                    case .heartbeat:
                        continue
                    case .disconnect:
                        // The broker does not know us (it restarted, or we broke the protocol):
                        // register again on a new socket, as the Majordomo rules require.
                        logger.warning("the broker asked this worker to re-register; reconnecting")
                        loop.close(from)
                        if let fresh = try? await openBrokerSocket(on: loop) {
                            socket = fresh
                            loop.send(ready.encode(), on: socket)
                        }
                    }
                }
            }
            logger.info("worker \(system.name) stopping: finishing tasks it holds")
        }
        loop.send(WorkerToBroker.disconnect.encode(), on: socket)
        // Let the DISCONNECT (and the last replies) leave before the socket goes.
        loop.close(socket, linger: 2000)
        await loop.shutdown()
        logger.info("worker \(system.name) disconnected")
    }

    private func openBrokerSocket(on loop: ZMQEventLoop) async throws -> ZMQEventLoop.SocketID {
        let number = socketCounter.withLock { counter -> Int in
            counter += 1
            return counter
        }
        let id = ZMQEventLoop.SocketID(number, name: "broker-\(number)")
        try await loop.open(
            .init(
                id: id, type: .dealer,
                options: [.sendHighWaterMark(100_000), .receiveHighWaterMark(100_000)],
                connect: [configuration.broker]))
        return id
    }
}

public enum WorkerSetupError: Error, CustomStringConvertible {
    case noServices

    public var description: String {
        switch self {
        case .noServices: "the worker has no services: register at least one handler before running it"
        }
    }
}
