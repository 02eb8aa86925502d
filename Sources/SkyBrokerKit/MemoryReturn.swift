import SkyWire

/// When the broker asks its shell to return freed memory to the system.
///
/// Swift's tables keep the capacity they grew to, so a queue that drained after holding much
/// keeps its memory: the machine then makes its storage anew (``storageReleased()``), and the
/// shell returns what that freed at the next tick, and again 1, 2, 4 and 8 s later: what libzmq
/// frees only once its pipes have sent the drain's answers (to clients that read slowly) comes
/// after the first return. Two ticks, not one: dropping the old tables and returning their
/// memory are two iterations of the loop, not one twice as long.
struct MemoryReturn: Sendable {
    /// The most queued bytes and waiting requests since memory was last returned.
    private var peakBytes = 0
    private var peakCount = 0
    /// The storage was made anew: the next tick returns memory.
    private var soon = false
    /// When to return memory again, and the wait before the time after.
    private var later: (at: MonotonicInstant, next: Duration)?
    static let laterReturns = (first: Duration.seconds(1), last: Duration.seconds(8))

    /// The queue holds `bytes` in `count` waiting requests.
    @inline(__always)
    mutating func queueHolds(bytes: Int, count: Int) {
        peakBytes = max(peakBytes, bytes)
        peakCount = max(peakCount, count)
    }

    /// Peers' registrations of `bytes` (their services' names) since memory was last returned.
    private var registeredBytes = 0
    /// Registrations of this many bytes in all make the shell return memory, as a large drain
    /// does: a READY names up to a quarter of a megabyte, and a peer that registers over and
    /// over fills libzmq's pipe with them, whose memory the allocator keeps once they are read
    /// (1.2 GB after 3 s of it).
    static let registeredBytesToReturn = 32 << 20

    /// A peer registered, naming `bytes` of services.
    mutating func registered(bytes: Int) {
        registeredBytes += bytes
        if registeredBytes >= Self.registeredBytesToReturn {
            registeredBytes = 0
            soon = true
        }
    }

    /// Whether the queue held `bytes` or `count` requests since memory was last returned: its
    /// drain is then worth making the storage anew.
    func held(bytes: Int, orCount count: Int) -> Bool { peakBytes >= bytes || peakCount >= count }

    /// The storage was made anew: the next tick asks the shell to return memory.
    mutating func storageReleased() {
        peakBytes = 0
        peakCount = 0
        soon = true
    }

    /// Whether the shell returns freed memory at this tick.
    mutating func isDue(now: MonotonicInstant) -> Bool {
        if soon {
            soon = false
            let first = Self.laterReturns.first
            later = (now + first, first * 2)
            return true
        }
        guard let later, now >= later.at else { return false }
        self.later = later.next <= Self.laterReturns.last ? (now + later.next, later.next * 2) : nil
        return true
    }
}
