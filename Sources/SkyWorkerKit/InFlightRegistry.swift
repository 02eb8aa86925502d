import SkyProtocol
import SkyZMQ

/// The tasks a worker is running, so that a CANCEL from the broker reaches the right handler and
/// a graceful stop knows when they are done. Shared by the worker's loop and the task bodies.
final class InFlightRegistry: Sendable {
    struct Key: Hashable, Sendable {
        /// The delivery tag the broker gave the task.
        var tag: [UInt8]
        var requestID: RequestID

        /// The request id alone: 128 random bits spread well, and hashing the tag's bytes one
        /// by one showed in profiles.
        func hash(into hasher: inout Hasher) { hasher.combine(requestID) }
    }

    private struct State {
        /// Running tasks; `nil` while the task is being attached.
        var tasks: [Key: Task<Void, Never>?] = [:]
        var cancelRequested: Set<Key> = []
        /// After the drain's grace period: results are no longer sent (the broker requeues them).
        var repliesSuppressed = false
    }

    private let state = Locked(State())

    var count: Int { state.withLock { $0.tasks.count } }

    /// Starts `body` as a task registered under `key`.
    func start(_ key: Key, _ body: @escaping @Sendable () async -> Void) {
        state.withLock { $0.tasks[key] = .some(nil) }
        let task = Task {
            await body()
            self.finish(key)
        }
        let cancelNow = state.withLock { state -> Bool in
            guard state.tasks[key] != nil else { return false }  // already finished
            state.tasks[key] = task
            return state.cancelRequested.remove(key) != nil
        }
        if cancelNow { task.cancel() }
    }

    /// Whether a finished task may still send its reply.
    var mayReply: Bool { state.withLock { !$0.repliesSuppressed } }

    private func finish(_ key: Key) {
        state.withLock { state in
            state.tasks[key] = nil
            state.cancelRequested.remove(key)
        }
    }

    /// Cancels the task under `key`, if it runs. Returns whether it did.
    @discardableResult
    func cancel(_ key: Key) -> Bool {
        let task = state.withLock { state -> Task<Void, Never>?? in
            guard let entry = state.tasks[key] else { return nil }
            if entry == nil { state.cancelRequested.insert(key) }
            return entry
        }
        guard let task else { return false }
        task?.cancel()
        return true
    }

    /// End of a drain's grace period: stops replies (the broker will run those tasks elsewhere)
    /// and cancels everything still running.
    func abandonAll() {
        let tasks = state.withLock { state -> [Task<Void, Never>] in
            state.repliesSuppressed = true
            return state.tasks.values.compactMap { $0 }
        }
        for task in tasks { task.cancel() }
    }
}
