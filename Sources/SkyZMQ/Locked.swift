import Foundation

/// A value guarded by a pthread mutex.
///
/// Used where threads that are not Swift tasks (the I/O thread) share state with async code.
/// A pthread-based lock is used rather than `Synchronization.Mutex` because ThreadSanitizer on
/// Linux does not see the futex-based `Mutex` as synchronisation and reports false races.
public final class Locked<Value> {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value. Keep `body` short and never block in it.
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

extension Locked: @unchecked Sendable where Value: Sendable {}  // all access to `value` goes through `lock`.
