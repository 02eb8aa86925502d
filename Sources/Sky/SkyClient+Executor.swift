import SkyZMQ

extension SkyClient {
    /// The client's I/O thread as a task executor: calling code that prefers it,
    /// `await withTaskExecutorPreference(sky.ioThreadExecutor) { ... }` (and every child task
    /// started inside), runs on that thread.
    ///
    /// Why: a call's reply lands on the I/O thread. A caller on Swift's cooperative pool is
    /// resumed by waking a pool thread, and its next call wakes the I/O thread again; each
    /// wake-up is most of a short call's cost. A caller that prefers the I/O thread is resumed
    /// where its reply landed, and its next call leaves in the same wake-up.
    ///
    /// For callers that do little between calls: a load generator, a fan-out of many small
    /// requests, a relay. While such code runs the thread neither reads replies nor sends
    /// heartbeats or retries, so computing between calls belongs on the pool. Before the client
    /// connected, and after it closed, the work runs on Swift's global executor.
    public nonisolated var ioThreadExecutor: any TaskExecutor { shell }
}

extension SkyClient.Shell: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        if let loop = loop.load() {
            loop.enqueue(job, as: asUnownedTaskExecutor())
        } else {
            globalConcurrentExecutor.enqueue(job)
        }
    }
}
