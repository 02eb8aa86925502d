import SkyZMQ

/// A clock that moves only when a test says so: `sleep` waits until ``advance(by:)`` moves `now`
/// past its deadline. Tests of timeouts and backoff then take no real time and cannot be flaky.
public struct ManualClock: Clock, Sendable {
    public struct Instant: InstantProtocol, Sendable {
        /// Time since the clock was made.
        public var offset: Duration

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        var deadline: Duration
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Duration = .zero
        var nextID: UInt64 = 0
        var sleepers: [UInt64: Sleeper] = [:]
        var countWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    /// A pthread lock (``Locked``), not `Synchronization.Mutex`, which ThreadSanitizer on Linux
    /// does not see as synchronisation: it reported the cancellation handler's removal of a
    /// sleeper as racing with a `sleep` that held the mutex.
    private final class Storage: Sendable {
        let state = Locked(State())
    }

    private let storage = Storage()

    public init() {}

    public var now: Instant { Instant(offset: storage.state.withLock { $0.now }) }
    public var minimumResolution: Duration { .zero }

    /// Tasks sleeping on this clock now.
    public var sleeperCount: Int { storage.state.withLock { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        let id = storage.state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (resume, woken) = storage.state.withLock {
                    state -> (Result<Void, any Error>?, [CheckedContinuation<Void, Never>]) in
                    if Task.isCancelled { return (.failure(CancellationError()), []) }
                    if deadline.offset <= state.now { return (.success(()), []) }
                    state.sleepers[id] = Sleeper(deadline: deadline.offset, continuation: continuation)
                    return (nil, Self.takeSatisfied(&state))
                }
                if let resume { continuation.resume(with: resume) }
                for waiter in woken { waiter.resume() }
            }
        } onCancel: {
            let sleeper = storage.state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline is reached.
    public func advance(by duration: Duration) {
        let due = storage.state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.now += duration
            let now = state.now
            let ready = state.sleepers.filter { $0.value.deadline <= now }
            for id in ready.keys { state.sleepers[id] = nil }
            return ready.values.sorted { $0.deadline < $1.deadline }.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// Returns once at least `count` tasks sleep on this clock: the moment a test may advance it.
    public func waitForSleepers(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = storage.state.withLock { state -> Bool in
                if state.sleepers.count >= count { return true }
                state.countWaiters.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    private static func takeSatisfied(_ state: inout State) -> [CheckedContinuation<Void, Never>] {
        let count = state.sleepers.count
        let ready = state.countWaiters.filter { $0.count <= count }.map(\.continuation)
        state.countWaiters.removeAll { $0.count <= count }
        return ready
    }
}
