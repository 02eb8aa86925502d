import SkyProtocol

/// A peer's ZeroMQ routing id at one of the broker's ROUTER sockets.
///
/// Ids of up to 16 bytes (libzmq generates 5-byte ones) are stored inline, without a heap
/// allocation: the broker keeps one per waiting request, so this is most of a request's overhead.
package struct PeerID: Hashable, Sendable, CustomStringConvertible {
    private let storage: InlineBytes

    package init(_ bytes: [UInt8]) {
        storage = InlineBytes(bytes)
    }

    /// A routing id read from a view of a received message.
    package init(_ bytes: ArraySlice<UInt8>) {
        storage = InlineBytes(bytes)
    }

    /// A routing id lent from a received message (``Frames/withFrame(_:_:)``).
    package init(_ bytes: UnsafeRawBufferPointer) {
        storage = InlineBytes(bytes)
    }

    /// The routing id as sent on the wire.
    package var bytes: [UInt8] { storage.array }

    /// Lends the routing id's bytes without making an array of them (a message to a peer is
    /// written straight from them).
    package func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withBytes(body)
    }

    package var description: String { Hex.encode(bytes) }
}
