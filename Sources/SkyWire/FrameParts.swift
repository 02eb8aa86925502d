/// A message sent frame by frame straight from the values that hold it: a routing id and a
/// head kept inline, then a body and an optional trailer by reference. Nothing is allocated
/// and nothing copied to gather them; libzmq copies each frame as it takes it.
///
/// The hot messages (a REQUEST or REPLY in its packed form) are built this way; building them
/// in a ``Frames`` buffer first cost an allocation, a copy of every byte and a release a
/// message. A message whose routing id and head do not fit ``inlineCapacity`` together (a long
/// service name) is built as ``Frames`` instead: ``init(routedTo:headBytes:body:trailer:head:)``
/// returns nil for it.
public struct FrameParts: Sendable {
    /// Bytes the routing id and the head may take together.
    public static let inlineCapacity = 112

    /// The routing id's bytes, then the head's.
    @usableFromInline var inline:
        (
            UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
            UInt64
        ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    /// Whether the message starts with a routing-id frame (a ROUTER's), and its length.
    @usableFromInline var routed: Bool
    @usableFromInline var routingCount: UInt8
    @usableFromInline var headCount: UInt8
    /// The frame after the head.
    public var body: ArraySlice<UInt8>
    /// The last frame, if there is one.
    public var trailer: [UInt8]?

    /// Writes the head with `head`, which must write exactly `headBytes` bytes.
    /// - Parameters:
    ///   - routingID: the routing-id frame a ROUTER sends first, if any.
    ///   - headBytes: the head's exact size.
    /// - Returns: nil when the routing id and the head do not fit ``inlineCapacity``.
    @inlinable public init?(
        routedTo routingID: UnsafeRawBufferPointer?, headBytes: Int, body: ArraySlice<UInt8>, trailer: [UInt8]?,
        head: (inout PackedFieldWriter) -> Void
    ) {
        let routingCount = routingID?.count ?? 0
        guard routingCount + headBytes <= Self.inlineCapacity else { return nil }
        routed = routingID != nil
        self.routingCount = UInt8(routingCount)
        headCount = UInt8(headBytes)
        self.body = body
        self.trailer = trailer
        withUnsafeMutableBytes(of: &inline) { raw in
            if let routingID, let source = routingID.baseAddress, routingCount > 0 {
                raw.baseAddress!.copyMemory(from: source, byteCount: routingCount)
            }
            var writer = PackedFieldWriter(
                UnsafeMutableRawBufferPointer(rebasing: raw[routingCount..<(routingCount + headBytes)]))
            head(&writer)
            precondition(writer.count == headBytes, "a packed head shorter than its announced size")
        }
    }

    /// How many frames the message has.
    @inlinable public var count: Int { (routed ? 1 : 0) + 2 + (trailer == nil ? 0 : 1) }

    /// Lends each frame in order, with whether it is the last; stops when `body` returns false.
    @inlinable public func forEachFrame(_ visit: (UnsafeRawBufferPointer, _ isLast: Bool) -> Bool) {
        var inline = inline
        let routingCount = Int(routingCount)
        let headEnd = routingCount + Int(headCount)
        let goOn = withUnsafeBytes(of: &inline) { raw in
            if routed, !visit(UnsafeRawBufferPointer(rebasing: raw[0..<routingCount]), false) { return false }
            return visit(UnsafeRawBufferPointer(rebasing: raw[routingCount..<headEnd]), false)
        }
        guard goOn else { return }
        let bodyIsLast = trailer == nil
        guard body.withUnsafeBytes({ visit($0, bodyIsLast) }), let trailer else { return }
        _ = trailer.withUnsafeBytes { visit($0, true) }
    }

    /// Each frame as an array (a message that could not be sent, and tests).
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
