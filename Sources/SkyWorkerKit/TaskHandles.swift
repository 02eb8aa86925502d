import SkyProtocol
import SkyZMQ

/// The tasks that run a worker's handlers, so that a cancellation decided on the I/O thread
/// reaches the right one. The I/O thread reserves the task's slot (from
/// ``WorkerStateMachine/Action/startTask(_:_:slot:)``) when it starts a task; the task group
/// child attaches itself when it runs and detaches when done. A cancellation that comes before
/// the child attached is kept and applied when it attaches.
///
/// By slot, not by key: a dictionary hashed the task's key three times a task. A slot is given
/// to another task once the machine dropped the one before (finished, or cancelled when the
/// connection changed), so each entry keeps its key: a child that finds another task's key
/// in its slot was dropped and cancels itself, and its late detach leaves the other alone.
final class TaskHandles: Sendable {
    private enum Entry {
        case empty
        case reserved(WorkerStateMachine.TaskKey, cancelled: Bool)
        case attached(WorkerStateMachine.TaskKey, RunningTask)
    }

    /// The task group child that runs a handler. Kept only between ``attachCurrentTask(_:slot:)``
    /// and ``detach(_:slot:)``, which the child itself calls before it returns, and used only
    /// under the lock: the task is alive whenever it is cancelled through it.
    struct RunningTask: @unchecked Sendable {  // UnsafeCurrentTask is not Sendable; see above.
        let task: UnsafeCurrentTask
    }

    /// Grows to the highest slot used (as many as ran at once).
    private let entries = Locked<[Entry]>([])

    /// Tasks reserved or attached.
    var count: Int {
        entries.withLock { entries in
            entries.count {
                if case .empty = $0 { false } else { true }
            }
        }
    }

    /// The I/O thread is about to start the task under `key` in `slot`.
    func reserve(_ key: WorkerStateMachine.TaskKey, slot: Int) {
        entries.withLock { entries in
            if slot >= entries.count {
                entries.append(contentsOf: repeatElement(.empty, count: slot - entries.count + 1))
            }
            entries[slot] = .reserved(key, cancelled: false)
        }
    }

    /// The calling task runs the task under `key` until it calls ``detach(_:slot:)``. If the
    /// task was cancelled before it started, or dropped and its slot given to another, the
    /// calling task is cancelled now.
    func attachCurrentTask(_ key: WorkerStateMachine.TaskKey, slot: Int) {
        withUnsafeCurrentTask { current in
            guard let current else { return }
            entries.withLock { entries in
                guard slot < entries.count, case .reserved(key, let cancelled) = entries[slot] else {
                    current.cancel()
                    return
                }
                entries[slot] = .attached(key, RunningTask(task: current))
                if cancelled { current.cancel() }
            }
        }
    }

    /// The task under `key` is done; call it from the task that attached itself.
    func detach(_ key: WorkerStateMachine.TaskKey, slot: Int) {
        entries.withLock { entries in
            guard slot < entries.count, case .attached(key, _) = entries[slot] else { return }
            entries[slot] = .empty
        }
    }

    /// Cancels the task under `key`, now or as soon as it attaches.
    func cancel(_ key: WorkerStateMachine.TaskKey, slot: Int) {
        entries.withLock { entries in
            guard slot < entries.count else { return }
            switch entries[slot] {
            case .reserved(key, _): entries[slot] = .reserved(key, cancelled: true)
            // Under the lock: the task cannot detach and end meanwhile.
            case .attached(key, let running): running.task.cancel()
            case .empty, .reserved, .attached: break
            }
        }
    }
}
