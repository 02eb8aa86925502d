import Logging
import SkyProtocol

extension ScanSystem {
    /// A fixed set of handlers, callable from any task without the actor.
    public struct Handlers: Sendable {
        let workerName: String
        let table: [String: Handler]
        /// The logger a handler's ``TaskContext`` carries: the worker's; `nil` in the client's
        /// local fallback.
        package var logger: Logger? = nil
        /// Where a ``TaskContext``'s progress goes: the worker's sinks; `nil` for nowhere.
        package var progressSinks: (any ProgressSinks)? = nil

        /// The services that have a handler, sorted (what READY announces).
        public var services: [String] { table.keys.sorted() }

        public func serves(_ service: String) -> Bool { table[service] != nil }

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
            guard let handler = table[request.service] else {
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
                }
                return TaskReply(requestID: request.requestID, status: .ok, body: result)
            } catch let error as InvalidPayload {
                return .failure(request.requestID, .invalidPayload, message: error.description)
            } catch is CancellationError {
                return .failure(request.requestID, .cancelled, message: "the task was cancelled")
            } catch {
                return .failure(
                    request.requestID, .handlerError, type: String(reflecting: Swift.type(of: error)),
                    message: String(describing: error))
            }
        }
    }
}
