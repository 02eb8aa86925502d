extension SkyClient {
    /// Who waits for a call's outcome: a caller suspended in ``SkyClient/request(service:body:options:)``
    /// (or `scan`), or a completion handler given to
    /// ``SkyClient/request(service:body:options:completion:)``, which the I/O thread runs where
    /// the reply landed: no task to resume, no thread to wake.
    enum CallWaiter: Sendable {
        /// Unsafe: resumed exactly once by whoever takes it out of its slot (the I/O thread, the
        /// cancellation handler, or the close), which a checked one would only verify at the
        /// cost of an allocation a call.
        case suspended(UnsafeContinuation<Completion, any Error>)
        case handler(@Sendable (Completion) -> Void)
        /// The result alone, for ``SkyClient/request(service:body:options:completion:)``: its
        /// closure kept as it came, where wrapping it in one taking a ``Completion`` allocated a
        /// closure context every call.
        case resultHandler(@Sendable (Result<[UInt8], SkyError>) -> Void)

        /// Hands over the outcome (consumed: the one waiter takes it without a copy).
        func complete(_ completion: consuming Completion) {
            switch self {
            case .suspended(let continuation): continuation.resume(returning: completion)
            case .handler(let handler): handler(completion)
            case .resultHandler(let handler): handler(completion.result)
            }
        }

        /// The caller's task was cancelled: it throws `CancellationError`. (A handler has no
        /// task, so nothing cancels it this way; should it come here, it hears what its
        /// ``CallHandle`` would have said.)
        func cancel() {
            switch self {
            case .suspended(let continuation): continuation.resume(throwing: CancellationError())
            case .handler(let handler): handler(Completion(result: .failure(CallHandle.cancelledError), attempts: 0))
            case .resultHandler(let handler): handler(.failure(CallHandle.cancelledError))
            }
        }
    }
}
