import SkyZMQ

/// How the I/O thread cancels a runner (see ``RunnerInbox``): through the handle of the
/// runner's task, which a runner is for that reason (an unstructured task that a child of the
/// worker's group awaits). A handle stays valid after its task ended, and cancelling it then
/// does nothing; an `UnsafeCurrentTask` kept past `withUnsafeCurrentTask`'s closure, as this
/// once was, is undefined behaviour by its documentation.
///
/// The runner may attach to its task before the code that made it gave the handle here: a
/// cancel in that moment is kept and applied by ``started(_:)``.
final class RunnerHandle: Sendable {
    private enum State: Sendable {
        case starting(cancelled: Bool)
        case running(@Sendable () -> Void)
    }

    private let state = Locked(State.starting(cancelled: false))

    init() {}

    /// The runner's task: cancels it now if ``cancel()`` came first.
    func started<Success>(_ task: Task<Success, Never>) {
        let cancelled = state.withLock { state in
            let cancelled = if case .starting(cancelled: true) = state { true } else { false }
            state = .running { task.cancel() }
            return cancelled
        }
        if cancelled { task.cancel() }
    }

    /// Cancels the runner's task (and so the handler it runs), now or once it is known.
    func cancel() {
        let cancel = state.withLock { state -> (@Sendable () -> Void)? in
            switch state {
            case .starting: state = .starting(cancelled: true); return nil
            case .running(let cancel): return cancel
            }
        }
        cancel?()
    }
}
