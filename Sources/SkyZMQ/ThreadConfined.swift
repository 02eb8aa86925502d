import CSkySystem
import Synchronization

/// A value that one thread uses, such as an I/O thread's state in a shell: `Sendable` so that
/// the shell can be, without a lock's cost or its suggestion that other threads may use it. The
/// first thread to use it owns it; a use from any other thread traps, naming the value (as
/// SwiftNIO's `NIOLoopBound` does for an event loop), instead of racing.
public final class ThreadConfined<Value>: @unchecked Sendable {  // only the owner thread uses `value`: checked
    @usableFromInline let value: UnsafeMutablePointer<Value>
    /// The owning thread's id (`sky_current_thread_id`), 0 until the first use.
    @usableFromInline let owner = Atomic<UInt>(0)
    @usableFromInline let name: String

    /// - Parameter name: what the trap names if another thread uses it.
    public init(_ value: Value, name: String) {
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
        self.name = name
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` with the value, on the owning thread (the first call makes its thread the
    /// owner); traps on any other thread.
    @inlinable
    public func withValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        let thread = sky_current_thread_id()
        let current = owner.load(ordering: .relaxed)
        if current != thread { claim(for: thread, owned: current) }
        return try body(&value.pointee)
    }

    @usableFromInline
    func claim(for thread: UInt, owned current: UInt) {
        guard current == 0, owner.compareExchange(expected: 0, desired: thread, ordering: .relaxed).exchanged else {
            preconditionFailure("\(name) belongs to one thread and was used from another")
        }
    }
}
