/// Buffers of received messages that an I/O thread writes the next messages into, once its
/// inline handler is done with them: a buffer allocated and freed for every message cost the
/// broker two of each a task, and the client and the worker one (docs/performance-history.md).
///
/// The pool keeps a reference to each buffer it hands out (``track(_:)``), and after the
/// handler returns (``reclaim()``) offers them again. It cannot tell whether the handler's
/// state still holds one (a broker keeps a message it could not deliver): such a buffer is
/// copied on write, as any shared array is, when it is used again, and its holder keeps its
/// bytes. Bounded: at most ``most`` buffers of at most ``largestBuffer`` bytes are kept, lent
/// or spare; larger messages and any beyond are allocated as before.
///
/// Only the I/O thread uses it, between its reads and its handler's calls.
public struct FrameBufferPool {
    /// How many buffers are kept, lent and spare each.
    public static let most = 32
    /// The capacity of the largest buffer kept.
    public static let largestBuffer = 2048

    /// Handed out since the last ``reclaim()``.
    @usableFromInline var lent: [[UInt8]] = []
    /// Free to write into.
    @usableFromInline var spare: [[UInt8]] = []

    public init() {}

    /// A buffer to write a message of `size` bytes into (its contents are written over), or
    /// `nil` if none is spare or the message is too large to keep.
    @inlinable mutating func take(_ size: Int) -> [UInt8]? {
        guard size <= Self.largestBuffer else { return nil }
        return spare.popLast()
    }

    /// Keeps a reference to a message's buffer, to offer it again after the handler.
    @inlinable mutating func track(_ buffer: [UInt8]) {
        guard lent.count < Self.most, buffer.capacity <= Self.largestBuffer else { return }
        lent.append(buffer)
    }

    /// The handler is done with the messages read so far: their buffers are spare again.
    public mutating func reclaim() {
        if spare.isEmpty {
            swap(&spare, &lent)
            return
        }
        while let buffer = lent.popLast(), spare.count < Self.most { spare.append(buffer) }
        // Not `removeAll(keepingCapacity:)`: see `removeAllKeepingBuffer`.
        lent.removeAllKeepingBuffer()
    }

    /// How many buffers are spare (tests).
    public var spareCount: Int { spare.count }
}
