import SkyZMQ

/// Hands the tasks the I/O thread starts to the tasks that run them: a runner that waits for
/// its next task gets one directly; the others go to the worker's task group in one batch per
/// wake-up of the I/O thread, and the group starts a runner for each.
///
/// **Runners.** A runner is a child of the group that runs one task after another: when its
/// task is done it takes the next waiting one, or waits for the next to come. A new child per
/// task cost its creation and its destruction (`swift_task_create`, its first allocations, its
/// group's bookkeeping: about 2,500 instructions a task); waking a waiting runner costs one
/// resumed continuation. A runner whose task was cancelled ends with it (a cancelled task stays
/// cancelled), and the group starts another when one is needed. At most ``idleLimit`` runners
/// wait at once; another ends when its task does, so that a burst's runners do not keep their
/// memory for good.
///
/// It replaces an `AsyncStream`, whose unspecialised generic code looked up type metadata and
/// registered a cancellation handler on every element (about 5,000 instructions per task at one
/// task in flight). Waiting here needs no cancellation handler: everything waiting is resumed
/// at ``finish()``, the shell's once the machine finished, or the worker's cancellation
/// handler's.
final class JobInbox: Sendable {
    private struct State: Sendable {
        /// Tasks no waiting runner took, for the group.
        var pending: [SkyWorker.Job] = []
        /// The group's loop, waiting for tasks to start runners for.
        var waiter: UnsafeContinuation<[SkyWorker.Job]?, Never>?
        /// Runners waiting for their next task.
        var idle: [UnsafeContinuation<SkyWorker.Job?, Never>] = []
        var finished = false
    }

    /// At most this many runners wait for a task at once.
    let idleLimit: Int
    private let state = Locked(State())

    init(idleLimit: Int = 256) {
        self.idleLimit = idleLimit
    }

    /// A started task: to a waiting runner, or queued for the group (see ``flush()``). Tasks
    /// given after ``finish()`` are dropped: the machine starts none once it finished.
    func offer(_ job: SkyWorker.Job) {
        state.withLock { state in
            guard !state.finished else { return }
            if let runner = state.idle.popLast() {
                // Resumed under the lock: resuming only enqueues the runner on its executor.
                runner.resume(returning: job)
            } else {
                state.pending.append(job)
            }
        }
    }

    /// Wakes the group's loop if tasks wait for runners: once per batch of offers.
    func flush() {
        let handOver = state.withLock { state -> (UnsafeContinuation<[SkyWorker.Job]?, Never>, [SkyWorker.Job])? in
            guard !state.pending.isEmpty, let waiter = state.waiter else { return nil }
            state.waiter = nil
            defer { state.pending = [] }
            return (waiter, state.pending)
        }
        if let (waiter, jobs) = handOver { waiter.resume(returning: jobs) }
    }

    /// Ends the group's loop once it took what is queued, and every waiting runner.
    func finish() {
        let (waiter, jobs, idle) = state.withLock { state in
            state.finished = true
            let waiter = state.waiter
            // The group's loop waits only while nothing was flushed to it: what is queued is its.
            let jobs = waiter != nil && !state.pending.isEmpty ? state.pending : nil
            if jobs != nil { state.pending = [] }
            let idle = state.idle
            state.waiter = nil
            state.idle = []
            return (waiter, jobs, idle)
        }
        waiter?.resume(returning: jobs)
        for runner in idle { runner.resume(returning: nil) }
    }

    /// For the group's loop: every task queued since its last call, waiting for one if there
    /// is none; nil once finished and taken. One such consumer only.
    func next() async -> [SkyWorker.Job]? {
        if let ready = state.withLock({ Self.take(&$0) }) { return ready }
        return await withUnsafeContinuation { continuation in
            let ready = state.withLock { state -> [SkyWorker.Job]?? in
                if let ready = Self.take(&state) { return ready }
                state.waiter = continuation
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// For a runner whose task is done: a queued task, or the next one offered; nil (the runner
    /// ends) once finished, or when ``idleLimit`` runners wait already.
    func nextForRunner() async -> SkyWorker.Job? {
        if let ready = state.withLock({ Self.takeForRunner(&$0, idleLimit: idleLimit) }) { return ready }
        return await withUnsafeContinuation { continuation in
            let ready = state.withLock { state -> SkyWorker.Job?? in
                if let ready = Self.takeForRunner(&state, idleLimit: idleLimit) { return ready }
                state.idle.append(continuation)
                return .none
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Whether the group's loop waits for a batch (for tests).
    var consumerWaits: Bool { state.withLock { $0.waiter != nil } }

    /// Runners waiting for a task (for tests).
    var idleRunners: Int { state.withLock { $0.idle.count } }

    /// What is queued, or nil (the consumer ends) once finished with nothing queued; `.none`
    /// when the consumer must wait.
    private static func take(_ state: inout State) -> [SkyWorker.Job]?? {
        if !state.pending.isEmpty {
            defer { state.pending = [] }
            return .some(state.pending)
        }
        return state.finished ? .some(nil) : .none
    }

    /// A queued task, or nil (the runner ends); `.none` when the runner must wait.
    private static func takeForRunner(_ state: inout State, idleLimit: Int) -> SkyWorker.Job?? {
        if let job = state.pending.popLast() { return .some(job) }
        return state.finished || state.idle.count >= idleLimit ? .some(nil) : .none
    }
}
