import SkyZMQ

/// Notices, on the broker's I/O thread, that the thread did not run for a long time: the
/// process was paused (SIGSTOP, a debugger, a stalled virtual machine) or starved. On a shared
/// job store a standby may have taken over meanwhile, so a broker that wakes must not expire
/// workers, hand their tasks on, answer clients or publish events before it knows: the journal
/// says whether it steps down (`OpenedJournal.stallGuard`), and from then on every input is
/// dropped until the broker has stopped.
final class StallGuard: Sendable {
    private struct State {
        var last: ContinuousClock.Instant?
        var trippedAt: ContinuousClock.Instant?
    }

    private let state = Locked(State())
    /// Given how long the thread did not run: whether the broker steps down (it has then been
    /// told so through the journal's `lost`).
    private let stepsDown: @Sendable (Duration) -> Bool

    init(_ stepsDown: @escaping @Sendable (Duration) -> Bool) {
        self.stepsDown = stepsDown
    }

    /// Whether the I/O thread may handle what woke it at `now`: false once the broker steps down.
    func mayServe(now: ContinuousClock.Instant) -> Bool {
        state.withLock { state in
            guard state.trippedAt == nil else { return false }
            defer { state.last = now }
            guard let last = state.last, stepsDown(last.duration(to: now)) else { return true }
            state.trippedAt = now
            return false
        }
    }
}
