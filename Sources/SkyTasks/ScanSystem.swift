import DequeModule
import Foundation
import SkyProtocol

/// The user's side of a worker: typed handlers registered per service, a name and a capacity.
///
/// A ``SkyWorker`` serves them remotely (the broker's credits keep at most ``capacity`` tasks
/// on it); ``execute(_:)`` runs them locally, for the client's fallback, with at most
/// ``capacity`` at once: further tasks wait in arrival order on continuations, and a finishing
/// handler hands its slot straight to the oldest waiter. Handlers run outside the actor, so a
/// CPU-bound handler never blocks others from being admitted.
public actor ScanSystem {
    /// A handler over encoded payloads, for services that do not decode (echo) or bring their own codec.
    public typealias RawHandler = @Sendable ([UInt8]) async throws -> [UInt8]

    public nonisolated let name: String
    public nonisolated let capacity: Int

    private var handlers: [String: RawHandler] = [:]
    private var running = 0
    private var waiters: Deque<CheckedContinuation<Void, Never>> = []

    /// The largest capacity a system takes: what a worker's READY can announce
    /// (`WorkerToBroker.maxCapacity`, skyworker's `--capacity` limit).
    public static let maxCapacity = Int(WorkerToBroker.maxCapacity)

    /// Takes any capacity, clamping it instead of trapping (a library must not end its caller's
    /// process for a value it can pass): below 1 is 1, above ``maxCapacity`` is ``maxCapacity``;
    /// ``capacity`` holds the clamped value.
    /// - Parameters:
    ///   - name: how the worker is called in events and logs.
    ///   - capacity: how many handlers may run at once (1...``maxCapacity``).
    public init(name: String, capacity: Int) {
        self.name = name
        self.capacity = min(max(1, capacity), Self.maxCapacity)
    }

    /// The services that have a handler.
    public var services: [String] { handlers.keys.sorted() }

    /// Handlers running now.
    public var runningCount: Int { running }

    /// Tasks waiting for a free slot.
    public var waitingCount: Int { waiters.count }

    /// Registers a typed handler for `T.service`.
    /// - Parameter coder: how tasks and results are encoded (JSON by default); clients of this
    ///   service must use the same one.
    public func register<T: SkyTask>(
        _ task: T.Type, coder: some TaskCoder = .json, handler: @escaping @Sendable (T) async throws -> T.Result
    ) {
        handlers[T.service] = { body in
            let decoded: T
            do {
                decoded = try coder.decode(T.self, from: body)
            } catch {
                throw InvalidPayload(service: T.service, reason: String(describing: error))
            }
            let result = try await handler(decoded)
            return try coder.encode(result)
        }
    }

    /// Registers a handler that sees the encoded payload.
    public func register(service: String, handler: @escaping RawHandler) {
        handlers[service] = handler
    }

    /// The handlers as registered now. A worker takes them once when it starts and calls them
    /// without passing through the actor: the broker's credits bound how many run at once.
    public var handlerTable: Handlers { Handlers(workerName: name, table: handlers) }

    /// Runs one task locally, at most ``capacity`` at once (the client's local fallback), and
    /// turns every outcome into a reply, as ``Handlers/execute(_:)`` does.
    public func execute(_ request: TaskRequest) async -> TaskReply {
        let table = handlerTable
        guard table.serves(request.service) else { return await table.execute(request) }
        await acquireSlot()
        defer { releaseSlot() }
        return await table.execute(request)
    }

    private func acquireSlot() async {
        if running < capacity {
            running += 1
            return
        }
        await withCheckedContinuation { waiters.append($0) }
        // The releasing task handed its slot over without decrementing `running`.
    }

    private func releaseSlot() {
        if let next = waiters.popFirst() {
            next.resume()
        } else {
            running -= 1
        }
    }
}

/// A task payload that does not decode as the service's task type.
struct InvalidPayload: Error, CustomStringConvertible {
    let service: String
    let reason: String
    var description: String { "the payload is not a valid \(service) task: \(reason)" }
}
