import DequeModule
import SkyZMQ

/// Hands the tasks the I/O thread starts to the tasks that run them: a runner that waits for
/// its next task gets one directly; the others are queued, and the worker's task group is
/// asked (once per wake-up of the I/O thread) to start a runner for each, which takes the
/// oldest queued task.
///
/// **Runners.** A runner is a task (started and awaited by a child of the group, so that the
/// I/O thread can cancel it by its ``RunnerHandle``) that runs one task after another: when its
/// task is done it takes the next queued one, or waits for the next to come. It holds no task
/// while it waits (a runner is not started with its task captured: the capture would keep the
/// task's request for the runner's whole life). A new child per
/// task cost its creation and its destruction (`swift_task_create`, its first allocations, its
/// group's bookkeeping, on every task); waking a waiting runner costs one
/// resumed continuation. A runner whose task was cancelled ends with it (a cancelled task stays
/// cancelled), and the group starts another when one is needed. At most ``idleLimit`` runners
/// wait at once; another ends when its task does, so that a burst's runners do not keep their
/// memory for good.
///
/// It replaces an `AsyncStream`, whose unspecialised generic code looked up type metadata and
/// registered a cancellation handler on every element. Waiting here needs no cancellation
/// handler: everything waiting is resumed at ``finish()``, the shell's once the machine
/// finished, or the worker's cancellation handler's.
final class RunnerInbox: Sendable {
    private struct State: Sendable {
        /// Tasks no waiting runner took, taken in the order they came.
        var pending: Deque<SkyWorker.TaskRun> = []
        /// Runners the group was asked to start that have not asked for their first task yet.
        var starting = 0
        /// The group's loop, waiting to be asked for runners.
        var waiter: UnsafeContinuation<Int?, Never>?
        /// Runners waiting for their next task.
        var idle: [UnsafeContinuation<SkyWorker.TaskRun?, Never>] = []
        var finished = false

        /// Queued tasks no runner is on its way to yet.
        var uncovered: Int { pending.count - starting }
    }

    /// At most this many runners wait for a task at once.
    let idleLimit: Int
    private let state = Locked(State())

    init(idleLimit: Int = 256) {
        self.idleLimit = idleLimit
    }

    /// A started task: to a waiting runner, or queued (see ``flush()``). Tasks given after
    /// ``finish()`` are dropped: the machine starts none once it finished.
    /// - Returns: whether the task was queued, so that only then ``flush()`` takes the lock.
    @discardableResult
    func offer(_ run: SkyWorker.TaskRun) -> Bool {
        let (runner, queued) = state.withLock { state -> (UnsafeContinuation<SkyWorker.TaskRun?, Never>?, Bool) in
            guard !state.finished else { return (nil, false) }
            if let runner = state.idle.popLast() { return (runner, false) }
            state.pending.append(run)
            return (nil, true)
        }
        // Resumed after the lock is released: the woken runner may take the CPU at once and
        // would block on the lock at its next task (two more thread switches a task).
        runner?.resume(returning: run)
        return queued
    }

    /// Asks the group's loop for runners if queued tasks need them: once per batch of offers.
    func flush() {
        let ask = state.withLock { state -> (UnsafeContinuation<Int?, Never>, Int)? in
            guard state.uncovered > 0, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return (waiter, Self.claim(&state))
        }
        if let (waiter, runners) = ask { waiter.resume(returning: runners) }
    }

    /// Ends the group's loop once it started runners for what is queued, and every waiting
    /// runner.
    func finish() {
        let (waiter, runners, idle) = state.withLock { state in
            state.finished = true
            let waiter = state.waiter
            let runners = waiter != nil && state.uncovered > 0 ? Self.claim(&state) : nil
            let idle = state.idle
            state.waiter = nil
            state.idle = []
            return (waiter, runners, idle)
        }
        waiter?.resume(returning: runners)
        for runner in idle { runner.resume(returning: nil) }
    }

    /// For the group's loop: how many runners to start for the tasks queued since its last
    /// call, waiting until some are; nil once finished and every queued task has its runner.
    /// One such consumer only.
    func next() async -> Int? {
        if let ready = state.withLock({ Self.take(&$0) }) { return ready }
        return await withUnsafeContinuation { continuation in
            let ready = state.withLock { state -> Int?? in
                if let ready = Self.take(&state) { return ready }
                state.waiter = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// For a runner: its next task, queued or the next one offered; nil (the runner ends) once
    /// finished, or when ``idleLimit`` runners wait already. `first`: a new runner's first call.
    func nextForRunner(first: Bool = false) async -> SkyWorker.TaskRun? {
        let ready = state.withLock { state in
            if first { state.starting = max(0, state.starting - 1) }
            return Self.takeForRunner(&state, idleLimit: idleLimit)
        }
        if let ready { return ready }
        return await withUnsafeContinuation { continuation in
            let ready = state.withLock { state -> SkyWorker.TaskRun?? in
                if let ready = Self.takeForRunner(&state, idleLimit: idleLimit) { return ready }
                state.idle.append(continuation)
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Whether the group's loop waits to be asked for runners (for tests).
    var consumerWaits: Bool { state.withLock { $0.waiter != nil } }

    /// Runners waiting for a task (for tests).
    var idleRunners: Int { state.withLock { $0.idle.count } }

    /// Runners for the uncovered tasks, counted as on their way.
    private static func claim(_ state: inout State) -> Int {
        let runners = state.uncovered
        state.starting += runners
        return runners
    }

    /// Runners to start, or nil (the consumer ends) once finished with every task covered;
    /// `.none` when the consumer must wait.
    private static func take(_ state: inout State) -> Int?? {
        if state.uncovered > 0 { return .some(claim(&state)) }
        return state.finished ? .some(nil) : .none
    }

    /// A queued task, or nil (the runner ends); `.none` when the runner must wait.
    private static func takeForRunner(_ state: inout State, idleLimit: Int) -> SkyWorker.TaskRun?? {
        if let run = state.pending.popFirst() { return .some(run) }
        return state.finished || state.idle.count >= idleLimit ? .some(nil) : .none
    }
}
