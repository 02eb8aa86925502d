import CSkySystem
import Synchronization

/// The I/O thread as a task executor: async code that prefers it
/// (`withTaskExecutorPreference(loop) { ... }`, and every child task started inside) runs on
/// the loop's thread, between its polls.
///
/// Why: a message that starts work on Swift's cooperative pool wakes a pool thread, and the
/// work's answer wakes the I/O thread again; each wake-up is most of a short message's cost.
/// Code that prefers the loop runs where its message landed, and what it posts back
/// (``post(input:)``, ``send(_:on:)``) is taken in the same wake-up, with no signal at all.
///
/// The price: while such code runs the thread neither polls nor sends, so it suits work that
/// is short or awaits (I/O, timers), not CPU-bound work, which would hold up every message and
/// heartbeat of the process. Jobs that arrive after the loop stopped run on Swift's global
/// executor instead, so a task that prefers the loop is never stranded.
extension ZMQEventLoop: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        enqueue(job, as: asUnownedTaskExecutor())
    }

    /// Runs `job` on the loop's thread as a job of `executor`: for a task executor that hands its
    /// jobs to the loop (a client's, which exists before its loop does). The job must run as the
    /// executor its task prefers; as another one, every `await` of the task would find itself on
    /// the wrong executor and be queued again instead of going on inline.
    public func enqueue(_ job: consuming ExecutorJob, as executor: UnownedTaskExecutor) {
        let job = Job(job: UnownedJob(job), executor: executor)
        enum Outcome { case queued, wake, rejected }
        let outcome = mailbox.withLock { box -> Outcome in
            if box.stopped { return .rejected }
            box.jobs.append(job)
            if box.wakePending { return .queued }
            box.wakePending = true
            mailPending.store(true, ordering: .releasing)
            return .wake
        }
        switch outcome {
        case .queued: break
        case .wake: wakeThread()
        case .rejected: globalConcurrentExecutor.enqueue(ExecutorJob(job.job))
        }
    }

    /// A job waiting in the mailbox, and the executor it runs as.
    struct Job: Sendable {
        let job: UnownedJob
        let executor: UnownedTaskExecutor
    }

    /// Whether the caller runs on the loop's thread.
    package var isOnLoopThread: Bool {
        threadID.load(ordering: .relaxed) == sky_current_thread_id()
    }
}
