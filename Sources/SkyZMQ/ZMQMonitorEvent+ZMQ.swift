import CZMQ
import SkyWire

// libzmq's numbers for the monitor's events: the events themselves are in SkyWire, below this
// module and the protocol, so that the pure client and worker machines read them without the
// transport.
extension ZMQMonitorEvent.Kind {
    init(raw: UInt16) {
        switch Int32(raw) {
        case ZMQ_EVENT_CONNECTED: self = .connected
        case ZMQ_EVENT_CONNECT_DELAYED: self = .connectDelayed
        case ZMQ_EVENT_CONNECT_RETRIED: self = .connectRetried
        case ZMQ_EVENT_LISTENING: self = .listening
        case ZMQ_EVENT_BIND_FAILED: self = .bindFailed
        case ZMQ_EVENT_ACCEPTED: self = .accepted
        case ZMQ_EVENT_ACCEPT_FAILED: self = .acceptFailed
        case ZMQ_EVENT_CLOSED: self = .closed
        case ZMQ_EVENT_CLOSE_FAILED: self = .closeFailed
        case ZMQ_EVENT_DISCONNECTED: self = .disconnected
        case ZMQ_EVENT_MONITOR_STOPPED: self = .monitorStopped
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: self = .handshakeFailedNoDetail
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: self = .handshakeSucceeded
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: self = .handshakeFailedProtocol
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: self = .handshakeFailedAuth
        default: self = .other(raw)
        }
    }

    /// A set of event kinds to ask the monitor for.
    public struct Set: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public static let all = Set(rawValue: ZMQ_EVENT_ALL)
        public static let connected = Set(rawValue: ZMQ_EVENT_CONNECTED)
        public static let connectRetried = Set(rawValue: ZMQ_EVENT_CONNECT_RETRIED)
        public static let accepted = Set(rawValue: ZMQ_EVENT_ACCEPTED)
        public static let disconnected = Set(rawValue: ZMQ_EVENT_DISCONNECTED)
        public static let handshakeSucceeded = Set(rawValue: ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
        public static let handshakeFailed = Set(
            rawValue: ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
    }
}

extension ZMQMonitorEvent {
    /// Decodes a monitor message: frame 0 is a 16-bit event id and a 32-bit value in host byte
    /// order, frame 1 the endpoint. Returns `nil` for anything else.
    public init?(message: ZMQMessage) {
        guard message.frames.count == 2, message.frames[0].count == 6 else { return nil }
        let head = message.frames[0]
        let id = head.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 0, as: UInt16.self) }
        let value = head.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 2, as: Int32.self) }
        self.init(
            kind: Kind(raw: id), value: value,
            endpoint: String(decoding: message.frames[1], as: UTF8.self))
    }
}
