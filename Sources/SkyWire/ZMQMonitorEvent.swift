/// One event from libzmq's socket monitor (`zmq_socket_monitor`): a transport-level fact about a
/// connection (accepted, disconnected, handshake failed...). It names an endpoint, never a peer's
/// routing id, so protocol-level membership cannot come from it; authentication failures can.
public struct ZMQMonitorEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case connected, connectDelayed, connectRetried, listening, bindFailed, accepted
        case acceptFailed, closed, closeFailed, disconnected, monitorStopped
        case handshakeFailedNoDetail, handshakeSucceeded, handshakeFailedProtocol, handshakeFailedAuth
        case other(UInt16)
    }

    public let kind: Kind
    /// The event's value: a file descriptor, an errno, a reconnect interval or a ZAP status code.
    public let value: Int32
    /// The endpoint the event is about.
    public let endpoint: String

    public init(kind: Kind, value: Int32, endpoint: String) {
        self.kind = kind
        self.value = value
        self.endpoint = endpoint
    }
}
