import SkyProtocol
import SkyZMQ

/// The tasks that run a worker's handlers, so that a cancellation decided on the I/O thread
/// reaches the right one. The I/O thread reserves a key when it starts a task; the task group
/// child attaches itself when it runs and detaches when done. A cancellation that comes before
/// the child attached is kept and applied when it attaches.
final class TaskHandles: Sendable {
    private enum Entry {
        case reserved(cancelled: Bool)
        case attached(RunningTask)
    }

    /// The task group child that runs a handler. Kept only between ``attach(_:_:)`` and
    /// ``detach(_:)``, which the child itself calls before it returns, and used only under the
    /// lock: the task is alive whenever it is cancelled through it.
    struct RunningTask: @unchecked Sendable {  // UnsafeCurrentTask is not Sendable; see above.
        let task: UnsafeCurrentTask
    }

    private let entries = Locked<[WorkerStateMachine.TaskKey: Entry]>([:])

    var count: Int { entries.withLock { $0.count } }

    /// The I/O thread is about to start the task under `key`.
    func reserve(_ key: WorkerStateMachine.TaskKey) {
        entries.withLock { $0[key] = .reserved(cancelled: false) }
    }

    /// The calling task runs the task under `key` until it calls ``detach(_:)``. If the task was
    /// cancelled before it started, the calling task is cancelled now.
    func attachCurrentTask(_ key: WorkerStateMachine.TaskKey) {
        withUnsafeCurrentTask { current in
            guard let current else { return }
            entries.withLock { entries in
                // One lookup: the entry is read and replaced at its index.
                guard let index = entries.index(forKey: key), case .reserved(let cancelled) = entries.values[index]
                else { return }
                entries.values[index] = .attached(RunningTask(task: current))
                if cancelled { current.cancel() }
            }
        }
    }

    /// The task under `key` is done; call it from the task that attached itself.
    func detach(_ key: WorkerStateMachine.TaskKey) {
        entries.withLock { _ = $0.removeValue(forKey: key) }
    }

    /// Cancels the task under `key`, now or as soon as it attaches.
    func cancel(_ key: WorkerStateMachine.TaskKey) {
        entries.withLock { entries in
            switch entries[key] {
            case .reserved: entries[key] = .reserved(cancelled: true)
            // Under the lock: the task cannot detach and end meanwhile.
            case .attached(let running): running.task.cancel()
            case nil: break
            }
        }
    }
}
