import SkyZMQ

/// Hands the tasks the I/O thread starts to the worker's task group: one lock and at most one
/// resumed continuation per batch, for every task that arrived together.
///
/// It replaces an `AsyncStream`, whose unspecialised generic code looked up type metadata
/// and registered a cancellation handler on every element: about 5,000 instructions per
/// task at one task in flight. It has one consumer (the group's loop), and it ends only at
/// ``finish()``: the shell's once the machine finished, or the worker's cancellation
/// handler's. So `next()` needs no cancellation handler of its own.
final class JobInbox: Sendable {
    private struct State: Sendable {
        var pending: [SkyWorker.Job] = []
        var waiter: UnsafeContinuation<[SkyWorker.Job]?, Never>?
        var finished = false
    }

    private let state = Locked(State())

    /// Queues started tasks for the consumer. Tasks given after ``finish()`` are dropped: the
    /// machine starts none once it finished.
    func yield(_ jobs: [SkyWorker.Job]) {
        let waiter = state.withLock { state -> UnsafeContinuation<[SkyWorker.Job]?, Never>? in
            guard !state.finished else { return nil }
            guard let waiter = state.waiter else {
                state.pending.append(contentsOf: jobs)
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: jobs)
    }

    /// Ends the consumer's loop once it took what is queued.
    func finish() {
        let waiter = state.withLock { state -> UnsafeContinuation<[SkyWorker.Job]?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Every task queued since the last call, waiting for one if there is none; nil once
    /// finished and taken. One consumer only.
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

    /// Whether the consumer waits for a batch (for tests).
    var consumerWaits: Bool { state.withLock { $0.waiter != nil } }

    /// What is queued, or nil (the consumer ends) once finished with nothing queued; `.none`
    /// when the consumer must wait.
    private static func take(_ state: inout State) -> [SkyWorker.Job]?? {
        if !state.pending.isEmpty {
            defer { state.pending = [] }
            return .some(state.pending)
        }
        return state.finished ? .some(nil) : .none
    }
}
