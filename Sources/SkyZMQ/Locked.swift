#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a pthread mutex.
///
/// Used where threads that are not Swift tasks (the I/O thread) share state with async code.
/// A pthread mutex is used rather than `Synchronization.Mutex` because ThreadSanitizer on
/// Linux does not see the futex-based `Mutex` as synchronisation and reports false races.
/// `withLock` is inlinable so that callers in other modules get it specialised for their value:
/// the unspecialised generic looked up type metadata at run time on every call, several
/// times per message on the I/O threads' hot paths. The value lives behind a pointer, not in
/// a stored `var`: the runtime checked exclusive access to a class's `var` on every call
/// (dozens of calls per message), which the mutex already ensures.
public final class Locked<Value> {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    public init(_ value: Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` with exclusive access to the value. Keep `body` short and never block in it.
    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}

extension Locked: @unchecked Sendable where Value: Sendable {}  // all access to `value` goes through `mutex`.
