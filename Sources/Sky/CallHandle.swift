/// A call started with a completion handler (``SkyClient/request(service:body:options:completion:)``,
/// ``SkyClient/scan(_:options:coder:completion:)``): what cancels it.
public struct CallHandle: Sendable {
    enum Target: Sendable {
        /// A call in the client's machine, by its waiter.
        case waiter(SkyClient.Shell, UInt64)
        /// A call that went through the `async` path, in this task.
        case task(Task<Void, Never>)
        /// A call that completed at once (refused, or made after the close).
        case none
    }

    let target: Target

    init(_ target: Target) {
        self.target = target
    }

    /// The error a cancelled call completes with.
    static let cancelledError = SkyError.cancelled("the call was cancelled by its handle")

    /// Ends the call if it has not completed: its completion runs once, with
    /// ``SkyError/cancelled(_:)``, and the broker is told to drop the request (as for an `async`
    /// caller whose task was cancelled). Does nothing once the call's outcome is on its way to
    /// the completion, or for a call that completed at once. The completion never runs inside
    /// this method.
    public func cancel() {
        switch target {
        case .waiter(let shell, let waiter): shell.cancel(waiter)
        case .task(let task): task.cancel()
        case .none: break
        }
    }
}
