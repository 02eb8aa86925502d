import Logging
import SkyProtocol

extension ScanSystem {
    /// A fixed set of handlers, callable from any task without the actor.
    public struct Handlers: Sendable {
        let workerName: String
        var table: [String: Handler] { lookup.table }
        /// Where a task finds its handler; a class, so that a worker's I/O thread holds it and
        /// asks it without copying this set (its strings, table and logger counted) every task.
        package let lookup: Lookup
        /// Services registered more than once, the last handler kept (a worker refuses them).
        package var registeredTwice: [String] = []
        /// The logger a handler's ``TaskContext`` carries: the worker's; `nil` in the client's
        /// local fallback.
        package var logger: Logger? = nil
        /// Where a ``TaskContext``'s progress goes: the worker's sinks; `nil` for nowhere.
        package var progressSinks: (any ProgressSinks)? = nil

        /// The handlers by service, fixed once made. Its lookups are inlinable: the worker's
        /// I/O thread asks it for every task, from another module.
        package final class Lookup: Sendable {
            @usableFromInline let table: [String: Handler]
            /// The handlers by service when there are a few, looked through in order: a service
            /// name compared costs far less than one hashed for the table's lookup, on every
            /// task (nil: more than ``fewLimit``, then the table).
            @usableFromInline let few: [Entry]?
            static let fewLimit = 8

            @usableFromInline struct Entry: Sendable {
                @usableFromInline var service: String
                @usableFromInline var handler: Handler
            }

            init(_ table: [String: Handler]) {
                self.table = table
                few = table.count > Self.fewLimit ? nil : table.map { Entry(service: $0.key, handler: $0.value) }
            }

            /// `service`'s handler, if it has one.
            @inlinable @inline(__always)
            func handler(for service: String) -> Handler? {
                guard let few else { return table[service] }
                for entry in few where entry.service == service { return entry.handler }
                return nil
            }

            /// `service`'s handler if it is synchronous.
            @inlinable @inline(__always)
            package func inlineHandler(for service: String) -> ScanSystem.InlineRawHandler? {
                guard case .inline(let run) = handler(for: service) else { return nil }
                return run
            }
        }

        init(workerName: String, table: [String: Handler], registeredTwice: [String]) {
            self.workerName = workerName
            lookup = Lookup(table)
            self.registeredTwice = registeredTwice
        }

        /// `service`'s handler, if it has one.
        private func handler(for service: String) -> Handler? { lookup.handler(for: service) }

        /// The services that have a handler, sorted (what READY announces).
        public var services: [String] { table.keys.sorted() }

        public func serves(_ service: String) -> Bool { handler(for: service) != nil }

        /// Runs one task and turns every outcome into a reply: the result, or a typed failure
        /// (unknown service, undecodable payload, cancellation, or the handler's error with its
        /// type and message).
        ///
        /// Runs on its caller's executor (the worker's task, without a hop); the handler runs
        /// on its own, so a handler that computes never holds up the ``ScanSystem`` actor.
        public nonisolated(nonsending) func execute(_ request: TaskRequest) async -> TaskReply {
            await execute(request, tag: nil)
        }

        /// ``execute(_:)`` for the delivery `tag`, whose handler's progress goes to
        /// ``progressSinks``.
        package nonisolated(nonsending) func execute(_ request: TaskRequest, tag: DeliveryTag?) async -> TaskReply {
            guard let handler = handler(for: request.service) else {
                return .failure(
                    request.requestID, .unknownService,
                    message:
                        "worker \(workerName) does not serve \(request.service); it serves \(services.joined(separator: ", "))"
                )
            }
            do {
                let result: [UInt8]
                switch handler {
                case .plain(let run):
                    result = try await run(request.body)
                case .contextual(let run):
                    var progress: (@Sendable () -> ProgressSink)?
                    if let tag, let sinks = progressSinks {
                        let requestID = request.requestID
                        progress = { sinks.sink(tag: tag, requestID: requestID) }
                    }
                    let context = TaskContext(request: request, started: .now, logger: logger, progress: progress)
                    result = try await run(request.body, context)
                case .inline(let run):
                    result = try run(request.body)
                }
                return TaskReply(requestID: request.requestID, status: .ok, body: result)
            } catch {
                return Self.failure(error, of: request)
            }
        }

        /// Whether `service`'s handler is synchronous (``ScanSystem/registerInline(_:coder:handler:)``).
        package func isInline(_ service: String) -> Bool { inlineHandler(for: service) != nil }

        /// `service`'s handler if it is synchronous.
        package func inlineHandler(for service: String) -> ScanSystem.InlineRawHandler? {
            lookup.inlineHandler(for: service)
        }

        /// Runs `request` with its synchronous handler `run` here and now, and turns the
        /// outcome into a reply as ``execute(_:)`` does. Static: it needs nothing of the set, and
        /// a caller that bound the set to call it copied it (its table's and logger's references
        /// counted up and down) every task.
        package static func execute(_ request: TaskRequest, inline run: ScanSystem.InlineRawHandler) -> TaskReply {
            do {
                return TaskReply(requestID: request.requestID, status: .ok, body: try run(request.body))
            } catch {
                return Self.failure(error, of: request)
            }
        }

        /// A handler's error as a reply: an undecodable payload, a cancellation, or the
        /// error's type and message.
        private static func failure(_ error: any Error, of request: TaskRequest) -> TaskReply {
            switch error {
            case let error as InvalidPayload:
                .failure(request.requestID, .invalidPayload, message: error.description)
            case is CancellationError:
                .failure(request.requestID, .cancelled, message: "the task was cancelled")
            default:
                .failure(
                    request.requestID, .handlerError, type: String(reflecting: Swift.type(of: error)),
                    message: String(describing: error))
            }
        }
    }
}
