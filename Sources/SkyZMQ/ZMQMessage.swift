/// A multipart ZeroMQ message as received: its frames, plus the metadata Sky reads.
public struct ZMQMessage: Sendable, Equatable {
    /// The frames in order. For a ROUTER socket the first frame is the sender's routing id.
    public var frames: [[UInt8]]
    /// The ZAP `User-Id` of the authenticated peer, when the socket was asked to read it and
    /// the peer authenticated through a ZAP handler; `nil` otherwise.
    public var userID: String?
    /// The peer's IP address, when the socket was asked to read it and the transport is TCP.
    public var peerAddress: String?

    public init(frames: [[UInt8]], userID: String? = nil, peerAddress: String? = nil) {
        self.frames = frames
        self.userID = userID
        self.peerAddress = peerAddress
    }

    /// The total payload size over all frames, in bytes.
    public var byteCount: Int { frames.reduce(0) { $0 + $1.count } }
}
