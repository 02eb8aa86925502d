import SkyWire

/// A multipart ZeroMQ message as received: its frames, plus the metadata Sky reads.
public struct ZMQMessage: Sendable, Equatable {
    /// The frames in order, in one buffer (see ``Frames``). For a ROUTER socket the first frame
    /// is the sender's routing id.
    public var content: Frames
    /// The ZAP `User-Id` of the authenticated peer, when the socket was asked to read it and
    /// the peer authenticated through a ZAP handler; `nil` otherwise.
    public var userID: String?
    /// The peer's IP address, when the socket was asked to read it and the transport is TCP.
    public var peerAddress: String?

    public init(content: Frames, userID: String? = nil, peerAddress: String? = nil) {
        self.content = content
        self.userID = userID
        self.peerAddress = peerAddress
    }

    public init(frames: [[UInt8]], userID: String? = nil, peerAddress: String? = nil) {
        self.init(content: Frames(frames), userID: userID, peerAddress: peerAddress)
    }

    /// Each frame as an array (copies; for code off the hot paths).
    public var frames: [[UInt8]] { content.arrays }

    /// The total payload size over all frames, in bytes.
    public var byteCount: Int { content.byteCount }
}
