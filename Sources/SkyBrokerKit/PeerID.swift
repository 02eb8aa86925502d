import SkyProtocol

/// A peer's ZeroMQ routing id at one of the broker's ROUTER sockets.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public var description: String { Hex.encode(bytes) }
}
