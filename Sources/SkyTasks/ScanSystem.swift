import DequeModule
import Foundation
import Logging
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

    /// A synchronous handler over encoded payloads (see ``registerRawInline(service:handler:)``).
    public typealias InlineRawHandler = @Sendable ([UInt8]) throws -> [UInt8]

    /// A registered handler: with its task's ``TaskContext`` or without. Only a handler that asks
    /// for the context gets one made, so the others cost what they did.
    @usableFromInline enum Handler: Sendable {
        case plain(RawHandler)
        case contextual(@Sendable ([UInt8], TaskContext) async throws -> [UInt8])
        /// Synchronous and declared non-blocking: a worker runs it on its I/O thread.
        case inline(InlineRawHandler)
    }

    public nonisolated let name: String
    public nonisolated let capacity: Int

    private var handlers: [String: Handler] = [:]
    /// Services registered more than once: the last handler would silently replace the
    /// earlier one, so a worker refuses to start with them (``Handlers/registeredTwice``).
    private var registeredTwice: [String] = []
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
        put(
            T.service,
            .plain { body in
                try coder.encode(try await handler(try Self.decode(T.self, from: body, coder: coder)))
            })
    }

    /// Registers a typed handler for `T.service` that also takes its task's ``TaskContext``
    /// (attempt, request and job id, deadline, a logger with those facts).
    ///
    /// A name of its own, not an overload of ``register(_:coder:handler:)``: the two forms differ
    /// only in their closure's arity, and under one name a mistake inside either closure was
    /// reported as the other's ("expects 1 argument, but 2 were used in closure body").
    public func registerWithContext<T: SkyTask>(
        _ task: T.Type, coder: some TaskCoder = .json,
        handler: @escaping @Sendable (T, TaskContext) async throws -> T.Result
    ) {
        put(
            T.service,
            .contextual { body, context in
                try coder.encode(try await handler(try Self.decode(T.self, from: body, coder: coder), context))
            })
    }

    /// Registers a synchronous typed handler that never blocks and computes briefly (a lookup in
    /// memory, a transformation of its task), which the worker runs inline on its I/O thread
    /// where the task landed: no task is created, and the reply leaves in the same wake-up.
    ///
    /// Why: a handler of a few microseconds costs less than the task a worker otherwise starts
    /// for it and the thread wake-ups on either side. The price: while it runs, the worker's
    /// I/O thread reads and sends nothing, heartbeats included, and every other task waits, so
    /// a handler that sleeps, blocks on I/O or computes for milliseconds belongs in
    /// ``register(_:coder:handler:)``. It is not cancelled (it ends before a cancellation could
    /// be read); it gets no ``TaskContext``. Run locally (the client's fallback) it runs as the
    /// other handlers do. With a tracer bootstrapped, the worker runs it as it runs the others,
    /// inside its server span, on a task.
    public func registerInline<T: SkyTask>(
        _ task: T.Type, coder: some TaskCoder = .json, handler: @escaping @Sendable (T) throws -> T.Result
    ) {
        put(
            T.service,
            .inline { body in
                try coder.encode(try handler(try Self.decode(T.self, from: body, coder: coder)))
            })
    }

    /// ``registerInline(_:coder:handler:)`` for a handler that sees the encoded payload.
    public func registerRawInline(service: String, handler: @escaping InlineRawHandler) {
        put(service, .inline(handler))
    }

    /// Registers a handler that sees the encoded payload. A name of its own, not an overload of
    /// ``register(_:coder:handler:)``: with both named `register`, a mistake inside a typed
    /// handler was reported against this one ("missing argument label 'service:'").
    public func registerRaw(service: String, handler: @escaping RawHandler) {
        put(service, .plain(handler))
    }

    private func put(_ service: String, _ handler: Handler) {
        if handlers.updateValue(handler, forKey: service) != nil, !registeredTwice.contains(service) {
            registeredTwice.append(service)
        }
    }

    /// A task's payload decoded, or ``InvalidPayload``.
    private static func decode<T: SkyTask>(_ type: T.Type, from body: [UInt8], coder: some TaskCoder) throws -> T {
        do {
            return try coder.decode(T.self, from: body)
        } catch {
            throw InvalidPayload(service: T.service, reason: String(describing: error))
        }
    }

    /// The handlers as registered now. A worker takes them once when it starts and calls them
    /// without passing through the actor: the broker's credits bound how many run at once.
    public var handlerTable: Handlers {
        Handlers(workerName: name, table: handlers, registeredTwice: registeredTwice)
    }

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
