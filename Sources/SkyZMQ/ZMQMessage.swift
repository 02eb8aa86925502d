import SkyWire

/// A multipart ZeroMQ message as received: its frames, plus the metadata Sky reads.
public struct ZMQMessage: Sendable, Equatable {
    /// The frames in order, in one buffer (see ``Frames``). For a ROUTER socket the first frame
    /// is the sender's routing id. Variable so that a reader can hide that frame in place
    /// (``Frames/removeFirst()``) once it has read it.
    public var content: Frames
    /// The ZAP `User-Id` of the authenticated peer, when the socket was asked to read it and
    /// the peer authenticated through a ZAP handler; `nil` otherwise.
    public let userID: String?
    /// The peer's IP address, when the socket was asked to read it and the transport is TCP.
    public let peerAddress: String?

    /// The total payload size over all frames, in bytes: counted once as the frames arrive,
    /// since the loop (for its batches) and the broker (for its byte limits) both ask, and
    /// counting walks every frame's bounds. As received: a frame hidden later still counts.
    public let byteCount: Int

    public init(content: Frames, userID: String? = nil, peerAddress: String? = nil) {
        self.init(content: content, byteCount: content.byteCount, userID: userID, peerAddress: peerAddress)
    }

    /// A message whose size the caller counted as it read the frames.
    init(content: Frames, byteCount: Int, userID: String?, peerAddress: String?) {
        self.content = content
        self.byteCount = byteCount
        self.userID = userID
        self.peerAddress = peerAddress
    }

    public init(frames: [[UInt8]], userID: String? = nil, peerAddress: String? = nil) {
        self.init(content: Frames(frames), userID: userID, peerAddress: peerAddress)
    }

    /// Each frame as an array (copies; for code off the hot paths).
    public var frames: [[UInt8]] { content.arrays }
}
