import SkyProtocol
import SkyZMQ

/// The runners that run a worker's handlers, so that a cancellation decided on the I/O thread
/// reaches the right one. The I/O thread reserves the task's slot (from
/// ``WorkerStateMachine/Action/startTask(_:_:slot:)``) when it starts a task and hands the
/// runner the ``Ticket`` it got; the runner attaches with it and its ``RunnerHandle`` when it
/// runs the task and detaches when done. A cancellation that comes before the runner attached
/// is kept and applied when it attaches.
///
/// By slot, not by key: a dictionary hashed the task's key three times a task. A slot is given
/// to another task once the machine dropped the one before (finished, or cancelled when the
/// connection changed), so a ticket carries the slot's use count: a child that finds its slot
/// taken again was dropped and cancels itself, and its late detach leaves the other alone.
/// The entries are plain values (a use count, a state, a request id, the runner): an
/// entry that held the task's key, whose delivery tag is an enum, was copied and destroyed
/// through the runtime's multi-payload enum functions on every task.
final class TaskHandles: Sendable {
    /// What the child of a task attaches and detaches with.
    struct Ticket: Sendable, Equatable {
        let slot: Int
        let use: UInt32
    }

    private enum State: UInt8 {
        case empty, reserved, cancelledBeforeAttaching, attached
    }

    private struct Entry {
        var use: UInt32 = 0
        var state = State.empty
        /// The task's request id: a cancel naming another one in this slot reaches nothing.
        var requestID = RequestID(high: 0, low: 0)
        /// Set while ``State/attached``.
        var runner: RunnerHandle?
    }

    /// Grows to the highest slot used (as many as ran at once).
    private let entries = Locked<[Entry]>([])

    /// Tasks reserved or attached.
    var count: Int {
        entries.withLock { entries in entries.count { $0.state != .empty } }
    }

    /// The I/O thread is about to start the task under `key` in `slot`: the ticket its child
    /// attaches with.
    func reserve(_ key: WorkerStateMachine.TaskKey, slot: Int) -> Ticket {
        entries.withLock { entries in
            if slot >= entries.count {
                entries.append(contentsOf: repeatElement(Entry(), count: slot - entries.count + 1))
            }
            entries[slot].use &+= 1
            entries[slot].state = .reserved
            entries[slot].requestID = key.requestID
            entries[slot].runner = nil
            return Ticket(slot: slot, use: entries[slot].use)
        }
    }

    /// The runner `runner`, the calling task, runs the task of `ticket` until it calls
    /// ``detach(_:)``. If the task was cancelled before it started, or dropped and its slot
    /// given to another, the calling task is cancelled now.
    func attach(_ ticket: Ticket, runner: RunnerHandle) {
        let cancelled = entries.withLock { entries in
            guard ticket.slot < entries.count, entries[ticket.slot].use == ticket.use else { return true }
            switch entries[ticket.slot].state {
            case .reserved:
                entries[ticket.slot].state = .attached
                entries[ticket.slot].runner = runner
                return false
            case .cancelledBeforeAttaching:
                entries[ticket.slot].state = .attached
                entries[ticket.slot].runner = runner
                return true
            case .empty, .attached:
                return true
            }
        }
        // The calling task cancels itself, within the closure: at once, whether or not its
        // handle was given to `runner` yet.
        if cancelled { withUnsafeCurrentTask { $0?.cancel() } }
    }

    /// The task of `ticket` is done; call it from the task that attached itself.
    func detach(_ ticket: Ticket) {
        entries.withLock { entries in
            guard ticket.slot < entries.count, entries[ticket.slot].use == ticket.use,
                entries[ticket.slot].state == .attached
            else { return }
            entries[ticket.slot].state = .empty
            entries[ticket.slot].runner = nil
        }
    }

    /// Cancels the task under `key` in `slot`, now or as soon as it attaches. The I/O thread
    /// reserves and cancels in the machine's order, so the slot's latest reservation is the
    /// task the machine means; its request id is checked all the same.
    func cancel(_ key: WorkerStateMachine.TaskKey, slot: Int) {
        entries.withLock { entries in
            guard slot < entries.count, entries[slot].requestID == key.requestID else { return }
            switch entries[slot].state {
            case .reserved: entries[slot].state = .cancelledBeforeAttaching
            // Under the lock, so that it reaches this task, not the runner's next one.
            case .attached: entries[slot].runner?.cancel()
            case .empty, .cancelledBeforeAttaching: break
            }
        }
    }
}
