import Sky
import Synchronization

/// Chains of calls through a callback API, as a C client keeps its requests going: each
/// call's completion starts its chain's next call, with no task in between. For the
/// ``CallerPlacement/completion`` placement.
///
/// Each chain's completion is one closure, made when the chain starts and given to every call
/// of the chain: a closure made per call (capturing the chain) allocated its context and
/// freed it on every call, a cost of the harness that the instruction counts charged to the
/// client. A C client's loop allocates nothing per call either. (A typed call's completion
/// takes another type, so its chain wraps `done` in a closure of its own per call.)
final class CallbackChains: Sendable {
    /// What a raw call completes with (`SkyClient.request(service:body:options:completion:)`'s
    /// argument as it is: a closure of another type would be wrapped in a new one every call).
    typealias Outcome = Result<[UInt8], SkyError>
    /// What each call of a chain completes with.
    typealias Done = @Sendable (Outcome) -> Void
    /// Starts one call whose outcome goes to `done`.
    typealias Call = @Sendable (_ done: @escaping Done) -> Void
    /// A success's check: `nil` if it is the expected answer, else why not (the run fails).
    typealias Check = @Sendable ([UInt8]) -> (any Error)?

    private struct State {
        var running: Int
        var failure: (any Error)?
        var finished: CheckedContinuation<Void, any Error>?
    }

    /// A chain's completion, made once, in a box: a closure kept in a generic container (a
    /// `Mutex`) came out of it wrapped in a new closure on every read.
    private final class DoneBox: Sendable {
        let done: Done
        init(_ done: @escaping Done) { self.done = done }
    }

    /// A chain: the completion each of its calls gets. It refers to the chain, so the run
    /// drops it at the end.
    private final class Chain: Sendable {
        let completion = Mutex<DoneBox?>(nil)
    }

    private let call: Call
    private let more: @Sendable () -> Bool
    private let check: Check
    private let state: Mutex<State>
    private let chains: [Chain]

    private init(lanes: Int, call: @escaping Call, more: @escaping @Sendable () -> Bool, check: @escaping Check) {
        self.call = call
        self.more = more
        self.check = check
        state = Mutex(State(running: lanes))
        chains = (0..<lanes).map { _ in Chain() }
        for chain in chains {
            let box = DoneBox { outcome in self.completed(outcome, chain) }
            chain.completion.withLock { $0 = box }
        }
    }

    /// Keeps `lanes` chains going while `more()` holds (asked after each call) and returns once
    /// every chain ended; throws the first call's error, or what `check` said of a success (a
    /// chain that failed ends).
    static func run(
        lanes: Int, more: @escaping @Sendable () -> Bool, check: @escaping Check = { _ in nil },
        call: @escaping Call
    ) async throws {
        guard lanes > 0 else { return }
        let chains = CallbackChains(lanes: lanes, call: call, more: more, check: check)
        defer { for chain in chains.chains { chain.completion.withLock { $0 = nil } } }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            chains.state.withLock { $0.finished = continuation }
            for chain in chains.chains { chains.next(chain) }
        }
    }

    private func next(_ chain: Chain) {
        if let box = chain.completion.withLock({ $0 }) { call(box.done) }
    }

    private func completed(_ outcome: Outcome, _ chain: Chain) {
        let error: (any Error)? =
            switch outcome {
            case .success(let value): check(value)
            case .failure(let error): error
            }
        if error == nil, more() {
            next(chain)
        } else {
            end(error)
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
