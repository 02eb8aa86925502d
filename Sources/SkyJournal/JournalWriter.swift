import CSkySystem
import Foundation

/// The journal's own thread, the one owner of its store: the broker's I/O thread never waits on
/// a disk.
///
/// Writes from any thread are queued; the thread takes every write queued since its last
/// commit and applies them in one transaction (group commit: one fsync for many jobs, so
/// durable throughput grows with load instead of being one fsync per job), then reports each
/// write's outcome on that thread. Reads queue behind the writes before them.
///
/// A write nobody waits for yet can be queued *with the next commit*
/// (``writeWithNextCommit(_:done:)``): it starts no transaction of its own, but joins the next
/// one that a write, a read or ``flush()`` starts, or is committed alone once it waited
/// `unhurriedDelay`. At a few jobs per millisecond, a job's outcome then shares the fsync of
/// the next submit instead of costing its own (on a small virtual machine an fsync and the
/// wake-ups around it cost about as much CPU as the rest of the job).
public final class JournalWriter: @unchecked Sendable {  // every `var` is guarded by `condition`.
    public typealias Completion = @Sendable (Result<JournalReceipt, JournalError>) -> Void

    private enum Work {
        case write([JobChange], Completion)
        case read(@Sendable (any JobStore) -> Void)
    }

    private let condition = NSCondition()
    private var queue: [Work] = []
    private var stopping = false
    private var stopped = false
    private var stopWaiters: [CheckedContinuation<Void, Never>] = []
    /// Callers of ``untilIdle()``.
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var commitCount = 0
    /// Something asks for a commit now: a write other than an unhurried one, a read, a flush.
    private var commitRequested = false
    /// When the oldest unhurried write still queued was queued.
    private var oldestUnhurried: ContinuousClock.Instant?
    /// Changes in one transaction at most, so that one huge backlog is not one huge transaction.
    private let maxBatch: Int
    /// How long an unhurried write waits for a commit to join at most.
    private let unhurriedDelay: Duration

    private init(maxBatch: Int, unhurriedDelay: Duration) {
        self.maxBatch = maxBatch
        self.unhurriedDelay = unhurriedDelay
    }

    /// Starts the thread and opens the store on it.
    /// - Throws: the store's error if it cannot be opened (the thread has ended then).
    public static func start(
        name: String = "sky-journal", maxBatch: Int = 4096, unhurriedDelay: Duration = .milliseconds(5),
        open: @escaping @Sendable () throws(JournalError) -> any JobStore
    ) async throws(JournalError) -> JournalWriter {
        let writer = JournalWriter(maxBatch: max(1, maxBatch), unhurriedDelay: max(.zero, unhurriedDelay))
        let opened: Result<Void, JournalError> = await withCheckedContinuation { ready in
            let thread = Thread {
                sky_name_this_thread(name)
                writer.serve(open, ready: ready)
                // The store is closed once `serve` returned: only then do stop()'s callers
                // resume, so that the file can be opened again at once.
                writer.finish()
            }
            thread.start()
        }
        try opened.get()
        return writer
    }

    /// Queues `changes`; `done` runs on the journal's thread once they are durable (or failed).
    /// After ``stop()`` it fails at once with the reason.
    public func write(_ changes: [JobChange], done: @escaping Completion) {
        enqueueWrite(changes, hurried: true, done: done)
    }

    /// Queues `changes` for the journal's next transaction without starting one: `done` runs
    /// once a later write, a read or ``flush()`` committed them, or after they waited the
    /// writer's `unhurriedDelay` (or failed). For a write nobody waits for yet; call ``flush()``
    /// when someone starts to.
    public func writeWithNextCommit(_ changes: [JobChange], done: @escaping Completion) {
        enqueueWrite(changes, hurried: false, done: done)
    }

    /// Commits what is queued now (a caller started waiting for an unhurried write).
    public func flush() {
        condition.lock()
        commitRequested = true
        condition.signal()
        condition.unlock()
    }

    private func enqueueWrite(_ changes: [JobChange], hurried: Bool, done: @escaping Completion) {
        condition.lock()
        if stopping {
            condition.unlock()
            done(.failure(.failed(path: "", operation: "write", reason: "the journal is stopping")))
            return
        }
        queue.append(.write(changes, done))
        if hurried {
            commitRequested = true
            condition.signal()
        } else if oldestUnhurried == nil {
            oldestUnhurried = .now
            // Waiting for nothing (no deadline) until now: it must start counting the delay.
            condition.signal()
        }
        condition.unlock()
    }

    /// Writes `changes` and returns once they are durable.
    @discardableResult
    public func write(_ changes: [JobChange]) async throws(JournalError) -> JournalReceipt {
        let result: Result<JournalReceipt, JournalError> = await withCheckedContinuation { done in
            write(changes) { done.resume(returning: $0) }
        }
        return try result.get()
    }

    /// Queues `body` to run on the journal's thread after the writes queued before it; after
    /// ``stop()`` it is not run, and `false` is returned.
    @discardableResult
    public func read(_ body: @escaping @Sendable (any JobStore) -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else { return false }
        queue.append(.read(body))
        commitRequested = true
        condition.signal()
        return true
    }

    /// Runs `body` on the journal's thread, after the writes queued before it.
    public func read<T: Sendable>(
        _ body: @escaping @Sendable (any JobStore) throws(JournalError) -> T
    ) async throws(JournalError) -> T {
        let result: Result<T, JournalError> = await withCheckedContinuation { done in
            condition.lock()
            guard !stopping else {
                condition.unlock()
                done.resume(
                    returning: .failure(.failed(path: "", operation: "read", reason: "the journal is stopping")))
                return
            }
            queue.append(
                .read { store in done.resume(returning: Result { () throws(JournalError) in try body(store) }) })
            commitRequested = true
            condition.signal()
            condition.unlock()
        }
        return try result.get()
    }

    /// Transactions committed so far (for tests and statistics).
    public var commits: Int {
        condition.lock()
        defer { condition.unlock() }
        return commitCount
    }

    /// Writes what is queued, then ends the thread (closing the store). Returns once it ended.
    public func stop() async {
        await waitForThread { done in
            stopping = true
            stopWaiters.append(done)
        }
    }

    /// Returns once the journal's thread has taken in everything queued before the call and
    /// waits for more (or for an unhurried write's delay), or has ended: for tests, the event
    /// that shows a commit was not started.
    func untilIdle() async {
        await waitForThread { idleWaiters.append($0) }
    }

    /// Suspends until the journal's thread resumes the continuation that `register` keeps
    /// (under the lock, with the thread woken), or at once if the thread has ended.
    private func waitForThread(_ register: (CheckedContinuation<Void, Never>) -> Void) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            condition.lock()
            if stopped {
                condition.unlock()
                done.resume()
                return
            }
            register(done)
            condition.signal()
            condition.unlock()
        }
    }

    /// Opens the store, reports how that went, and runs until stopped.
    private func serve(
        _ open: () throws(JournalError) -> any JobStore, ready: CheckedContinuation<Result<Void, JournalError>, Never>
    ) {
        let store: any JobStore
        do {
            store = try open()
        } catch {
            ready.resume(returning: .failure(error))
            return
        }
        ready.resume(returning: .success(()))
        run(store)
    }

    private func finish() {
        condition.lock()
        stopped = true
        let waiters = stopWaiters + idleWaiters
        stopWaiters.removeAll()
        idleWaiters.removeAll()
        condition.unlock()
        for waiter in waiters { waiter.resume() }
    }

    private func run(_ store: any JobStore) {
        while true {
            condition.lock()
            while !stopping && !commitRequested {
                for idle in idleWaiters { idle.resume() }
                idleWaiters.removeAll()
                guard let oldest = oldestUnhurried else {
                    condition.wait()
                    continue
                }
                let left = ContinuousClock.now.duration(to: oldest + unhurriedDelay)
                guard left > .zero else { break }
                // Relative to now, so a wall-clock step stretches one wait at most.
                let seconds = Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18
                _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
            }
            commitRequested = false
            if queue.isEmpty {
                guard stopping else {
                    condition.unlock()
                    continue
                }
                condition.unlock()
                return
            }
            let work = queue
            queue.removeAll(keepingCapacity: true)
            oldestUnhurried = nil
            condition.unlock()
            perform(work, on: store)
        }
    }

    /// Applies consecutive writes as one transaction (up to `maxBatch` changes); reads run in
    /// their place in the queue.
    private func perform(_ work: [Work], on store: any JobStore) {
        var changes: [JobChange] = []
        var waiting: [Completion] = []
        func commit() {
            guard !waiting.isEmpty else { return }
            let outcome = Result { () throws(JournalError) -> JournalReceipt in try store.apply(changes) }
            if case .success = outcome {
                condition.lock()
                commitCount += 1
                condition.unlock()
            }
            for done in waiting { done(outcome) }
            changes.removeAll(keepingCapacity: true)
            waiting.removeAll(keepingCapacity: true)
        }
        for item in work {
            switch item {
            case .write(let batch, let done):
                if !waiting.isEmpty && changes.count + batch.count > maxBatch { commit() }
                changes += batch
                waiting.append(done)
            case .read(let body):
                commit()
                body(store)
            }
        }
        commit()
    }
}
