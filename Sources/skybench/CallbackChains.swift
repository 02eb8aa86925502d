import Synchronization

/// Chains of calls through a callback API, as a C client keeps its requests going: each
/// call's completion starts its chain's next call, with no task in between. For the
/// ``CallerPlacement/completion`` placement.
final class CallbackChains: Sendable {
    /// Starts one call and runs its argument once, with the call's error or nil.
    typealias Call = @Sendable (_ done: @escaping @Sendable ((any Error)?) -> Void) -> Void

    private struct State {
        var running: Int
        var failure: (any Error)?
        var finished: CheckedContinuation<Void, any Error>?
    }

    private let call: Call
    private let more: @Sendable () -> Bool
    private let state: Mutex<State>

    private init(lanes: Int, call: @escaping Call, more: @escaping @Sendable () -> Bool) {
        self.call = call
        self.more = more
        state = Mutex(State(running: lanes))
    }

    /// Keeps `lanes` chains going while `more()` holds (asked after each call) and returns once
    /// every chain ended; throws the first call's error (a chain that failed ends).
    static func run(lanes: Int, more: @escaping @Sendable () -> Bool, call: @escaping Call) async throws {
        guard lanes > 0 else { return }
        let chains = CallbackChains(lanes: lanes, call: call, more: more)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            chains.state.withLock { $0.finished = continuation }
            for _ in 0..<lanes { chains.next() }
        }
    }

    private func next() {
        call { error in
            if error == nil, self.more() {
                self.next()
            } else {
                self.end(error)
            }
        }
    }

    private func end(_ error: (any Error)?) {
        let finished = state.withLock { state -> (CheckedContinuation<Void, any Error>, (any Error)?)? in
            if state.failure == nil, let error { state.failure = error }
            state.running -= 1
            guard state.running == 0, let finished = state.finished else { return nil }
            state.finished = nil
            return (finished, state.failure)
        }
        guard let (continuation, failure) = finished else { return }
        if let failure {
            continuation.resume(throwing: failure)
        } else {
            continuation.resume()
        }
    }
}

extension Result {
    /// The failure, if it is one (what a chain's `done` takes).
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
