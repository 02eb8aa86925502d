import SkyWire

/// How much of one tick's bounded work (expiries, due jobs) is left: a count and a time.
///
/// A count alone does not bound an iteration of the I/O thread: on a loaded machine, or in a
/// debug build, 100 expiries took 40–60 ms, and a broker that stalls makes its workers'
/// heartbeats late. Past either bound the tick stops and asks for the next one at once, after
/// the shell has served its sockets again. Entries skipped without an answer (stale heap
/// entries) are bounded by the time too.
struct WorkBudget {
    private var remaining: Int
    private let deadline: MonotonicInstant
    private let clock: @Sendable () -> MonotonicInstant

    init(count: Int, until deadline: MonotonicInstant, clock: @escaping @Sendable () -> MonotonicInstant) {
        remaining = count
        self.deadline = deadline
        self.clock = clock
    }

    /// Whether more work may be done now: count left and the time not over. Reads the clock
    /// (a vDSO call, tens of nanoseconds) once per item.
    var hasRoom: Bool { remaining > 0 && clock() < deadline }

    /// Whether a bound was reached: the rest waits for the next tick.
    var isSpent: Bool { remaining <= 0 || clock() >= deadline }

    /// Counts one item of work done.
    mutating func spend() { remaining -= 1 }
}
