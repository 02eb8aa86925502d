import SkyProtocol
import SkyZMQ

/// The handles of the handlers a worker runs, so that a cancellation decided on the I/O thread
/// reaches the right one. The I/O thread reserves a key when it starts a task; the task attaches
/// its handle when it runs and detaches when done. A cancellation that comes before the handle
/// is attached is kept and applied when it attaches.
final class TaskHandles: Sendable {
    private enum Entry {
        case reserved(cancelled: Bool)
        case attached(Task<TaskReply, Never>)
    }

    private let entries = Locked<[WorkerStateMachine.TaskKey: Entry]>([:])

    var count: Int { entries.withLock { $0.count } }

    /// The I/O thread is about to start the task under `key`.
    func reserve(_ key: WorkerStateMachine.TaskKey) {
        entries.withLock { $0[key] = .reserved(cancelled: false) }
    }

    /// The task runs as `handle`. Returns `false` if it was cancelled before it could start
    /// (the handle is then cancelled too).
    func attach(_ key: WorkerStateMachine.TaskKey, _ handle: Task<TaskReply, Never>) -> Bool {
        let cancelled = entries.withLock { entries -> Bool in
            guard case .reserved(let cancelled) = entries[key] else { return false }
            entries[key] = .attached(handle)
            return cancelled
        }
        if cancelled { handle.cancel() }
        return !cancelled
    }

    func detach(_ key: WorkerStateMachine.TaskKey) {
        entries.withLock { _ = $0.removeValue(forKey: key) }
    }

    /// Cancels the task under `key`, now or as soon as it attaches.
    func cancel(_ key: WorkerStateMachine.TaskKey) {
        let handle = entries.withLock { entries -> Task<TaskReply, Never>? in
            switch entries[key] {
            case .reserved: entries[key] = .reserved(cancelled: true)
            case .attached(let handle): return handle
            case nil: break
            }
            return nil
        }
        handle?.cancel()
    }
}
