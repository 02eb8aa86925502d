import CZMQ

/// A socket option with a typed value. Options only affect binds and connects made after them.
public enum ZMQSocketOption: Sendable, Hashable {
    /// How long unsent messages are kept after close, in milliseconds (-1 forever, 0 drop).
    case linger(milliseconds: Int32)
    /// Queue limit per peer for outgoing messages (0 = no limit).
    case sendHighWaterMark(Int32)
    /// Queue limit per peer for incoming messages (0 = no limit).
    case receiveHighWaterMark(Int32)
    /// The routing id this socket announces to a ROUTER peer.
    case routingID([UInt8])
    /// ROUTER: fail sends to unknown peers with `EHOSTUNREACH` instead of dropping them silently.
    case routerMandatory(Bool)
    /// ROUTER: a new connection that announces a routing id already in use takes it over (the
    /// old connection is presumed dead) instead of being ignored.
    case routerHandover(Bool)
    /// Largest inbound frame in bytes; a peer sending a larger one is disconnected (-1 = no limit).
    case maxMessageSize(Int64)
    /// First reconnect delay in milliseconds.
    case reconnectInterval(milliseconds: Int32)
    /// Upper bound of the doubling reconnect delay in milliseconds (0 = no backoff).
    case reconnectIntervalMax(milliseconds: Int32)
    /// Deadline for the ZMTP/security handshake in milliseconds (0 = none).
    case handshakeInterval(milliseconds: Int32)
    /// SUB: receive messages whose first frame starts with this prefix (empty = everything).
    case subscribe([UInt8])
    /// XPUB: pass every subscription message up, not just the first one per topic.
    case xpubVerbose(Bool)
    /// Only queue messages to peers whose connection is complete.
    case immediate(Bool)
    /// CURVE: act as the server (needs ``curveSecretKey(_:)``).
    case curveServer(Bool)
    /// CURVE: this socket's public key (32 bytes).
    case curvePublicKey([UInt8])
    /// CURVE: this socket's secret key (32 bytes).
    case curveSecretKey([UInt8])
    /// CURVE client: the server's public key (32 bytes).
    case curveServerKey([UInt8])
    /// The ZAP domain this socket authenticates in.
    case zapDomain(String)
    /// ZMTP heartbeat (PING) interval in milliseconds (0 = off).
    case heartbeatInterval(milliseconds: Int32)
    /// ZMTP heartbeat timeout in milliseconds.
    case heartbeatTimeout(milliseconds: Int32)

    func apply(to socket: UnsafeMutableRawPointer) throws(ZMQError) {
        switch self {
        case .linger(let ms): try Self.set(socket, ZMQ_LINGER, ms, "ZMQ_LINGER")
        case .sendHighWaterMark(let n): try Self.set(socket, ZMQ_SNDHWM, n, "ZMQ_SNDHWM")
        case .receiveHighWaterMark(let n): try Self.set(socket, ZMQ_RCVHWM, n, "ZMQ_RCVHWM")
        case .routingID(let id): try Self.set(socket, ZMQ_ROUTING_ID, id, "ZMQ_ROUTING_ID")
        case .routerMandatory(let on):
            try Self.set(socket, ZMQ_ROUTER_MANDATORY, Int32(on ? 1 : 0), "ZMQ_ROUTER_MANDATORY")
        case .routerHandover(let on):
            try Self.set(socket, ZMQ_ROUTER_HANDOVER, Int32(on ? 1 : 0), "ZMQ_ROUTER_HANDOVER")
        case .maxMessageSize(let n): try Self.set(socket, ZMQ_MAXMSGSIZE, n, "ZMQ_MAXMSGSIZE")
        case .reconnectInterval(let ms):
            try Self.set(socket, ZMQ_RECONNECT_IVL, ms, "ZMQ_RECONNECT_IVL")
        case .reconnectIntervalMax(let ms):
            try Self.set(socket, ZMQ_RECONNECT_IVL_MAX, ms, "ZMQ_RECONNECT_IVL_MAX")
        case .handshakeInterval(let ms):
            try Self.set(socket, ZMQ_HANDSHAKE_IVL, ms, "ZMQ_HANDSHAKE_IVL")
        case .subscribe(let prefix): try Self.set(socket, ZMQ_SUBSCRIBE, prefix, "ZMQ_SUBSCRIBE")
        case .xpubVerbose(let on):
            try Self.set(socket, ZMQ_XPUB_VERBOSE, Int32(on ? 1 : 0), "ZMQ_XPUB_VERBOSE")
        case .immediate(let on): try Self.set(socket, ZMQ_IMMEDIATE, Int32(on ? 1 : 0), "ZMQ_IMMEDIATE")
        case .curveServer(let on):
            try Self.set(socket, ZMQ_CURVE_SERVER, Int32(on ? 1 : 0), "ZMQ_CURVE_SERVER")
        case .curvePublicKey(let key):
            try Self.set(socket, ZMQ_CURVE_PUBLICKEY, key, "ZMQ_CURVE_PUBLICKEY")
        case .curveSecretKey(let key):
            try Self.set(socket, ZMQ_CURVE_SECRETKEY, key, "ZMQ_CURVE_SECRETKEY")
        case .curveServerKey(let key):
            try Self.set(socket, ZMQ_CURVE_SERVERKEY, key, "ZMQ_CURVE_SERVERKEY")
        case .zapDomain(let domain):
            // Typed, so the bytes overload is chosen (the generic one would copy the array's
            // own pointer and length instead of the text).
            let text: [UInt8] = Array(domain.utf8)
            try Self.set(socket, ZMQ_ZAP_DOMAIN, text, "ZMQ_ZAP_DOMAIN")
        case .heartbeatInterval(let ms):
            try Self.set(socket, ZMQ_HEARTBEAT_IVL, ms, "ZMQ_HEARTBEAT_IVL")
        case .heartbeatTimeout(let ms):
            try Self.set(socket, ZMQ_HEARTBEAT_TIMEOUT, ms, "ZMQ_HEARTBEAT_TIMEOUT")
        }
    }

    private static func set<T>(
        _ socket: UnsafeMutableRawPointer, _ option: Int32, _ value: T, _ name: String
    ) throws(ZMQError) {
        var value = value
        let rc = withUnsafeBytes(of: &value) { zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }
        if rc != 0 { throw ZMQError.last("zmq_setsockopt(\(name))") }
    }

    private static func set(
        _ socket: UnsafeMutableRawPointer, _ option: Int32, _ bytes: [UInt8], _ name: String
    ) throws(ZMQError) {
        let rc = bytes.withUnsafeBytes { zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }
        if rc != 0 { throw ZMQError.last("zmq_setsockopt(\(name))") }
    }
}
