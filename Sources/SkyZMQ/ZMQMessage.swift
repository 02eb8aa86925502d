import SkyProtocol

/// A multipart ZeroMQ message as received: its frames, plus the metadata Sky reads.
package struct ZMQMessage: Sendable, Equatable {
    /// The frames in order, in one buffer (see ``Frames``). For a ROUTER socket the first frame
    /// is the sender's routing id.
    package var content: Frames
    /// The ZAP `User-Id` of the authenticated peer, when the socket was asked to read it and
    /// the peer authenticated through a ZAP handler; `nil` otherwise.
    package var userID: String?
    /// The peer's IP address, when the socket was asked to read it and the transport is TCP.
    package var peerAddress: String?

    package init(content: Frames, userID: String? = nil, peerAddress: String? = nil) {
        self.content = content
        self.userID = userID
        self.peerAddress = peerAddress
    }

    package init(frames: [[UInt8]], userID: String? = nil, peerAddress: String? = nil) {
        self.init(content: Frames(frames), userID: userID, peerAddress: peerAddress)
    }

    /// Each frame as an array (copies; for code off the hot paths).
    package var frames: [[UInt8]] { content.arrays }

    /// The total payload size over all frames, in bytes.
    package var byteCount: Int { content.byteCount }
}
