import Foundation
import Logging
import SkyProtocol
import SkyZMQ

/// Runs tasks on a Sky cluster.
///
/// ```swift
/// let sky = try await SkyClient(broker: "tcp://127.0.0.1:5555")
/// let report = try await sky.scan(ScanTask(sector: 42))
/// ```
///
/// One client multiplexes any number of concurrent calls over one connection: each call gets a
/// unique ``RequestID``, and replies are matched to calls by it. The connection is owned by an
/// I/O thread; calls never block a thread while they wait. Call ``close()`` when done (dropping
/// the last reference also closes the connection, without waiting).
public actor SkyClient {
    private static let socket = ZMQEventLoop.SocketID(0, name: "broker")

    /// The broker's clients endpoint this client talks to.
    public nonisolated let broker: String
    private let loop: ZMQEventLoop
    private var pending: [RequestID: CheckedContinuation<TaskReply, any Error>] = [:]
    private var closed = false
    private var pump: Task<Void, Never>?
    /// Replies that matched no waiting call (late, duplicate, or for a cancelled call).
    public private(set) var unmatchedReplies = 0

    /// Connects to a broker. The connection is made in the background: calls made before the
    /// broker is reachable wait for it.
    public init(broker: String = "tcp://127.0.0.1:5555") async throws {
        self.broker = broker
        loop = try await ZMQEventLoop.start(
            name: "skyclient-io",
            sockets: [
                .init(
                    id: Self.socket, type: .dealer,
                    // libzmq reconnects a lost connection after 1 s, doubling to 32 s, each wait
                    // lengthened by a random part of up to 1 s (its built-in jitter).
                    options: [
                        .sendHighWaterMark(0), .receiveHighWaterMark(0), .reconnectInterval(milliseconds: 1000),
                        .reconnectIntervalMax(milliseconds: 32_000),
                    ],
                    connect: [broker])
            ])
        let inbound = loop.inbound
        pump = Task { [weak self] in
            for await batch in inbound {
                guard let self else { return }
                await self.receive(batch)
            }
        }
    }

    deinit {
        // Calls in flight keep the client alive, so none is waiting here; just free the thread.
        loop.requestShutdown()
    }

    /// Runs a task on some worker and returns its result.
    /// - Parameter coder: how the task and result are encoded (JSON by default); the workers of
    ///   the service must use the same one.
    /// - Throws: ``SkyError`` for every failure the cluster reports, `CancellationError` when
    ///   the calling task is cancelled.
    public func scan<T: SkyTask>(_ task: T, coder: some TaskCoder = .json) async throws -> T.Result {
        let body: [UInt8]
        do {
            body = try coder.encode(task)
        } catch {
            throw SkyError.invalidTask(String(describing: error))
        }
        let reply = try await request(service: T.service, body: body)
        do {
            return try coder.decode(T.Result.self, from: reply)
        } catch {
            throw SkyError.invalidResult(String(describing: error))
        }
    }

    /// Runs a task given as an encoded payload and returns the encoded result.
    public func request(service: String, body: [UInt8]) async throws -> [UInt8] {
        // The broker drops a request with an invalid name unanswered; refuse it here instead.
        guard WireFormat.isValidName(service) else {
            throw SkyError.invalidTask(
                "service name \"\(service)\" is not 1...255 bytes of UTF-8 without control characters")
        }
        let requestID = RequestID.random()
        let request = TaskRequest(requestID: requestID, service: service, body: body)
        let reply: TaskReply = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<TaskReply, any Error>) in
                if closed {
                    continuation.resume(throwing: SkyError.clientClosed)
                } else if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    pending[requestID] = continuation
                    loop.send(ClientToBroker.request(request).encode(), on: Self.socket)
                }
            }
        } onCancel: {
            Task { await self.abandon(requestID) }
        }
        guard reply.status == .ok else { throw SkyError(status: reply.status, body: reply.body, service: service) }
        return reply.body
    }

    /// The broker's current view of the cluster.
    public func clusterSnapshot() async throws -> ClusterSnapshot {
        let body = try await request(service: BrokerService.workers, body: [])
        do {
            return try JSONDecoder().decode(ClusterSnapshot.self, from: Data(body))
        } catch {
            throw SkyError.invalidResult("mmi.workers: \(error)")
        }
    }

    /// Calls waiting for a reply now.
    public var inFlightCount: Int { pending.count }

    /// Closes the connection. Waiting calls throw ``SkyError/clientClosed``.
    public func close() async {
        guard !closed else { return }
        closed = true
        let waiting = pending
        pending.removeAll()
        for continuation in waiting.values { continuation.resume(throwing: SkyError.clientClosed) }
        await loop.shutdown()
        pump?.cancel()
    }

    /// The caller's task was cancelled: stop waiting, and tell the broker, which drops the request
    /// or has its worker cancel the handler.
    private func abandon(_ requestID: RequestID) {
        guard let continuation = pending.removeValue(forKey: requestID) else { return }
        continuation.resume(throwing: CancellationError())
        if !closed { loop.send(ClientToBroker.cancel(requestID).encode(), on: Self.socket) }
    }

    private func receive(_ batch: [ZMQEventLoop.Inbound]) {
        for inbound in batch {
            guard case .message(_, let message) = inbound else { continue }
            guard case .reply(let reply) = try? BrokerToClient.decode(message.frames) else {
                unmatchedReplies += 1
                continue
            }
            if let continuation = pending.removeValue(forKey: reply.requestID) {
                continuation.resume(returning: reply)
            } else {
                unmatchedReplies += 1
            }
        }
    }
}
