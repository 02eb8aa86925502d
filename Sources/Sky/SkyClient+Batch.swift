import SkyWire

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
    /// The batch keeps pace with its reader: once `concurrency` outcomes wait unread, no task
    /// starts until the loop reads one (before, outcomes piled up unread while tasks went on
    /// starting). `tasks` is read as tasks are started, so a sequence that makes its tasks as it
    /// is read keeps memory bounded by `concurrency` however many it yields and however slowly
    /// the loop's body runs: ``scanAll(count:concurrency:options:coder:task:)`` is one (Swift's
    /// `lazy.map` is not `Sendable`, and `(0..<n).lazy.map { … }` here is an array). The
    /// progress's total is the sequence's `underestimatedCount`.
    public nonisolated func scanAll<T: SkyTask, Tasks: Sequence & Sendable>(
        _ tasks: Tasks, concurrency: Int = 64, options: ScanOptions? = nil, coder: some TaskCoder = .json
    ) -> AsyncStream<BatchResult<T>> where Tasks.Element == T {
        let limit = max(1, concurrency)
        let time = time
        let (results, output) = AsyncStream.makeStream(of: BatchResult<T>.self)
        // One element each time the reader took an outcome: what lets the next task start.
        let (reads, read) = AsyncStream.makeStream(of: Void.self)
        let runner = Task {
            let start = time.now()
            var progress = BatchProgress(total: tasks.underestimatedCount)
            var pending = tasks.makeIterator()
            var readsTaken = reads.makeAsyncIterator()
            // Outcomes that may wait unread before starting a task waits for a read.
            var unreadAllowed = limit
            await withTaskGroup(of: Finished<T>?.self) { group in
                var next = 0
                func launch() -> Bool {
                    guard let task = pending.next() else { return false }
                    let index = next
                    next += 1
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
                for _ in 0..<limit where !launch() { break }
                for await finished in group {
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
                    if unreadAllowed > 0 {
                        unreadAllowed -= 1
                    } else if await readsTaken.next() == nil {
                        break  // the reader is gone, or this task was cancelled
                    }
                    if Task.isCancelled { break }
                    _ = launch()
                }
                group.cancelAll()
            }
            output.finish()
        }
        let reader = BatchReader(results: results, read: read, runner: runner)
        return AsyncStream(unfolding: { await reader.next() })
    }
}

extension SkyClient {
    /// ``scanAll(_:concurrency:options:coder:)`` of `count` tasks made one at a time as they
    /// start, by `task(index)`: a batch of millions in memory bounded by `concurrency`.
    ///
    /// ```swift
    /// for await done in sky.scanAll(count: 1_000_000, concurrency: 64, task: { ScanTask(sector: $0) }) { … }
    /// ```
    public nonisolated func scanAll<T: SkyTask>(
        count: Int, concurrency: Int = 64, options: ScanOptions? = nil, coder: some TaskCoder = .json,
        task: @escaping @Sendable (Int) -> T
    ) -> AsyncStream<BatchResult<T>> {
        scanAll(MadeTasks(count: max(0, count), make: task), concurrency: concurrency, options: options, coder: coder)
    }
}

/// Tasks `0..<count`, each made when it is read.
private struct MadeTasks<T: SkyTask>: Sequence, Sendable {
    let count: Int
    let make: @Sendable (Int) -> T

    var underestimatedCount: Int { count }

    func makeIterator() -> AnyIterator<T> {
        var next = 0
        return AnyIterator {
            guard next < count else { return nil }
            defer { next += 1 }
            return make(next)
        }
    }
}

/// The reader's end of a batch: each outcome taken lets the batch start one more task, and
/// dropping it (the loop stopped, or its task was cancelled) cancels the tasks still in flight.
private actor BatchReader<T: SkyTask> {
    private var results: AsyncStream<BatchResult<T>>.Iterator
    private let read: AsyncStream<Void>.Continuation
    private let runner: Task<Void, Never>

    init(results: AsyncStream<BatchResult<T>>, read: AsyncStream<Void>.Continuation, runner: Task<Void, Never>) {
        self.results = results.makeAsyncIterator()
        self.read = read
        self.runner = runner
    }

    func next() async -> BatchResult<T>? {
        var iterator = results
        let result = await iterator.next(isolation: self)
        results = iterator
        if result != nil { read.yield() }
        return result
    }

    deinit {
        runner.cancel()
        read.finish()
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
