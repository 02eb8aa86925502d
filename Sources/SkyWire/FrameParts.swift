/// A message lent frame by frame straight from the memory that holds it, for the length of one
/// call: a routing id (a ROUTER's first frame), a head written on the stack, a body and an
/// optional trailer. Nothing is allocated, copied or reference counted to gather them; libzmq
/// copies each frame as it takes it.
///
/// The hot messages (a REQUEST or REPLY in its packed form) are sent this way. Building them in
/// a ``Frames`` buffer first cost an allocation, a copy of every byte and a release a message;
/// keeping the head in a value of its own, which moved from the codec to the sender and into
/// the socket, cost a `memcpy` of it at every step (docs/performance-history.md).
///
/// Its pointers are valid only inside the closure that lends it: keep none of them. A message
/// that must outlive the call (a send that has to wait for room) is copied into a ``Frames``
/// with ``Frames/init(_:)``.
public struct FrameParts {
    /// The routing-id frame a ROUTER sends first, if any.
    public let routingID: UnsafeRawBufferPointer?
    /// The frame that names the message: the packed header.
    public let head: UnsafeRawBufferPointer
    /// The frame after the head.
    public let body: UnsafeRawBufferPointer
    /// The last frame, if there is one.
    public let trailer: UnsafeRawBufferPointer?

    @usableFromInline init(
        routingID: UnsafeRawBufferPointer?, head: UnsafeRawBufferPointer, body: UnsafeRawBufferPointer,
        trailer: UnsafeRawBufferPointer?
    ) {
        self.routingID = routingID
        self.head = head
        self.body = body
        self.trailer = trailer
    }

    /// Writes the head with `write` into memory on the stack (the heap for an unusually long
    /// one), then lends the message to `use`.
    /// - Parameters:
    ///   - routingID: the routing-id frame a ROUTER sends first, if any.
    ///   - headBytes: the head's exact size; `write` must write exactly that many bytes.
    ///   - body: the frame after the head.
    ///   - trailer: the last frame, if any.
    @inlinable public static func lend<Result>(
        routedTo routingID: UnsafeRawBufferPointer?, headBytes: Int, body: ArraySlice<UInt8>, trailer: [UInt8]?,
        head write: (inout PackedFieldWriter) -> Void, to use: (FrameParts) -> Result
    ) -> Result {
        withUnsafeTemporaryAllocation(byteCount: headBytes, alignment: MemoryLayout<UInt64>.alignment) { buffer in
            var writer = PackedFieldWriter(buffer)
            write(&writer)
            precondition(writer.count == headBytes, "a packed head shorter than its announced size")
            let head = UnsafeRawBufferPointer(buffer)
            return body.withUnsafeBytes { body in
                guard let trailer else {
                    return use(FrameParts(routingID: routingID, head: head, body: body, trailer: nil))
                }
                return trailer.withUnsafeBytes { trailer in
                    use(FrameParts(routingID: routingID, head: head, body: body, trailer: trailer))
                }
            }
        }
    }

    /// How many frames the message has.
    @inlinable public var count: Int { (routingID == nil ? 0 : 1) + 2 + (trailer == nil ? 0 : 1) }

    /// Lends each frame in order, with whether it is the last; stops when `visit` returns false.
    @inlinable public func forEachFrame(_ visit: (UnsafeRawBufferPointer, _ isLast: Bool) -> Bool) {
        if let routingID, !visit(routingID, false) { return }
        guard visit(head, false), visit(body, trailer == nil), let trailer else { return }
        _ = visit(trailer, true)
    }

    /// Each frame as an array (tests, and messages off the hot paths).
    public var arrays: [[UInt8]] {
        var frames: [[UInt8]] = []
        frames.reserveCapacity(count)
        forEachFrame { frame, _ in
            frames.append(Array(frame))
            return true
        }
        return frames
    }
}

extension Frames {
    /// The message's frames copied into one buffer, to outlive the call that lent them.
    public init(_ parts: FrameParts) {
        let routing = parts.routingID.map { Self.inlineSize($0.count) } ?? 0
        let trailer = parts.trailer.map { Self.inlineSize($0.count) } ?? 0
        var writer = Writer(
            frames: parts.count,
            bytes: routing + Self.inlineSize(parts.head.count) + Self.inlineSize(parts.body.count) + trailer)
        parts.forEachFrame { frame, _ in
            writer.append(frame)
            return true
        }
        self = writer.finish()
    }
}

extension FrameParts: FrameSource {}
