import Synchronization

/// A loop that is set once and then read from any thread without a lock: how a client, which
/// starts its I/O thread at its first call, finds the loop on every later call and job.
///
/// Not Synchronization's `AtomicLazyReference`: its `load()` is a generic call into another
/// module that looked up type metadata on every read, on every call. Here the atomic is
/// specialised for the loop.
public struct LoopReference: ~Copyable, Sendable {
    private let stored = Atomic<Unmanaged<ZMQEventLoop>?>(nil)

    public init() {}

    /// The loop, once one was stored.
    public func load() -> ZMQEventLoop? {
        stored.load(ordering: .acquiring)?.takeUnretainedValue()
    }

    /// Stores `loop` unless a loop is stored already.
    /// - Returns: the loop stored now, `loop` or the earlier one.
    @discardableResult
    public func storeIfNil(_ loop: ZMQEventLoop) -> ZMQEventLoop {
        let candidate = Unmanaged.passRetained(loop)
        let (exchanged, original) = stored.compareExchange(
            expected: nil, desired: candidate, ordering: .acquiringAndReleasing)
        if exchanged { return loop }
        candidate.release()
        return original!.takeUnretainedValue()
    }

    deinit {
        stored.load(ordering: .acquiring)?.release()
    }
}
