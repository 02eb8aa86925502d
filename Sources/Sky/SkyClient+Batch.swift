/// How far a batch has come.
public struct BatchProgress: Sendable, Equatable {
    /// Tasks in the batch.
    public var total: Int
    /// Tasks finished successfully.
    public var completed = 0
    /// Tasks that failed for good (after their retries).
    public var failed = 0
    /// Extra attempts made, over all tasks.
    public var retried = 0
    /// Time since the batch started.
    public var elapsed: Duration = .zero

    public init(total: Int) {
        self.total = total
    }

    /// Finished tasks per second so far.
    public var tasksPerSecond: Double {
        let seconds = elapsed.inSeconds
        return seconds > 0 ? Double(completed + failed) / seconds : 0
    }

    public var finished: Int { completed + failed }
}

/// One finished task of a batch.
public struct BatchResult<T: SkyTask>: Sendable {
    /// The task's position in the batch.
    public let index: Int
    public let task: T
    public let result: Result<T.Result, SkyError>
    /// Attempts it took (1 if the first succeeded).
    public let attempts: Int
    /// From the moment it was started to its outcome.
    public let latency: Duration
    /// The batch's progress including this task.
    public let progress: BatchProgress
}

extension SkyClient {
    /// Runs many tasks with at most `concurrency` in flight and yields each outcome as it
    /// completes (not in input order). Failed attempts are retried as `options` says; each
    /// element carries the batch's progress (completed, failed, retried, tasks/s).
    ///
    /// ```swift
    /// for await done in sky.scanAll(sectors.map { ScanTask(sector: $0) }, concurrency: 64) {
    ///     print(done.index, done.result, done.progress.tasksPerSecond)
    /// }
    /// ```
    ///
    /// Stopping the iteration (or cancelling its task) cancels the tasks still in flight.
    ///
    /// `tasks` is read as tasks are started, so a lazy sequence (`(0..<n).lazy.map { … }`) keeps
    /// memory bounded by `concurrency` however many tasks it yields; the progress's total is the
    /// sequence's `underestimatedCount`.
    public nonisolated func scanAll<T: SkyTask, Tasks: Sequence & Sendable>(
        _ tasks: Tasks, concurrency: Int = 64, options: ScanOptions? = nil, coder: some TaskCoder = .json
    ) -> AsyncStream<BatchResult<T>> where Tasks.Element == T {
        let limit = max(1, concurrency)
        let time = time
        let (stream, output) = AsyncStream.makeStream(of: BatchResult<T>.self)
        let runner = Task {
            let start = time.now()
            var progress = BatchProgress(total: tasks.underestimatedCount)
            var pending = tasks.makeIterator()
            await withTaskGroup(of: Finished<T>?.self) { group in
                var next = 0
                var running = 0
                func launch() -> Bool {
                    guard let task = pending.next() else { return false }
                    let index = next
                    next += 1
                    running += 1
                    group.addTask {
                        let began = time.now()
                        guard
                            let (result, attempts) = try? await self.scanReportingAttempts(
                                task, options: options, coder: coder)
                        else { return nil }  // cancelled
                        return Finished(
                            index: index, task: task, result: result, attempts: attempts,
                            latency: time.now() - began)
                    }
                    return true
                }
                while running < limit, launch() {}
                for await finished in group {
                    running -= 1
                    guard let finished else { continue }
                    switch finished.result {
                    case .success: progress.completed += 1
                    case .failure: progress.failed += 1
                    }
                    progress.retried += max(0, finished.attempts - 1)
                    progress.elapsed = time.now() - start
                    output.yield(
                        BatchResult(
                            index: finished.index, task: finished.task, result: finished.result,
                            attempts: finished.attempts, latency: finished.latency, progress: progress))
                    if !Task.isCancelled { _ = launch() }
                }
            }
            output.finish()
        }
        output.onTermination = { _ in runner.cancel() }
        return stream
    }
}

/// A task of a batch as its child task reports it.
private struct Finished<T: SkyTask>: Sendable {
    let index: Int
    let task: T
    let result: Result<T.Result, SkyError>
    let attempts: Int
    let latency: Duration
}
