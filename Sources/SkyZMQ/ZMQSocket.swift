import CZMQ

/// One libzmq socket.
///
/// Deliberately not `Sendable`: a ZeroMQ socket must be used by one thread only, and the compiler
/// enforces that by refusing to move it across isolation domains. In Sky every socket is created
/// and used by a ``ZMQEventLoop``'s I/O thread; tests may use one on a single thread directly.
public final class ZMQSocket {
    let handle: UnsafeMutableRawPointer
    /// Keeps the context alive as long as the socket: `zmq_ctx_term` waits for every socket.
    private let context: ZMQContext
    public let type: ZMQSocketType
    private var isClosed = false

    public init(context: ZMQContext, type: ZMQSocketType) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.rawValue) else {
            throw ZMQError.last("zmq_socket")
        }
        self.handle = handle
        self.context = context
        self.type = type
    }

    deinit {
        if !isClosed { zmq_close(handle) }
    }

    /// Closes the socket now; unsent messages are kept for at most `linger` (if given).
    public func close(linger: Int32? = nil) {
        guard !isClosed else { return }
        if let linger { try? set(.linger(milliseconds: linger)) }
        zmq_close(handle)
        isClosed = true
    }

    public func set(_ option: ZMQSocketOption) throws(ZMQError) {
        try option.apply(to: handle)
    }

    public func set(_ options: [ZMQSocketOption]) throws(ZMQError) {
        for option in options { try option.apply(to: handle) }
    }

    public func bind(_ endpoint: String) throws(ZMQError) {
        if zmq_bind(handle, endpoint) != 0 { throw ZMQError.last("zmq_bind(\(endpoint))") }
    }

    public func connect(_ endpoint: String) throws(ZMQError) {
        if zmq_connect(handle, endpoint) != 0 { throw ZMQError.last("zmq_connect(\(endpoint))") }
    }

    public func disconnect(_ endpoint: String) throws(ZMQError) {
        if zmq_disconnect(handle, endpoint) != 0 { throw ZMQError.last("zmq_disconnect(\(endpoint))") }
    }

    /// The endpoint of the last bind or connect, with the real port after binding `tcp://host:*`.
    public var lastEndpoint: String {
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        guard zmq_getsockopt(handle, ZMQ_LAST_ENDPOINT, &buffer, &size) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether a message can be read now (`ZMQ_EVENTS` has `POLLIN`).
    public var canReceive: Bool { events & Int32(ZMQ_POLLIN) != 0 }

    /// Whether a message can be sent now without blocking (`ZMQ_EVENTS` has `POLLOUT`).
    public var canSend: Bool { events & Int32(ZMQ_POLLOUT) != 0 }

    private var events: Int32 {
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        zmq_getsockopt(handle, ZMQ_EVENTS, &value, &size)
        return value
    }

    /// Sends all frames as one message.
    ///
    /// - Returns: `false` if `dontWait` is set and the message could not be queued now
    ///   (the high-water mark is reached); nothing was sent then. ZeroMQ delivers multipart
    ///   messages atomically, so once the first frame is accepted the rest are too.
    @discardableResult
    public func send(_ frames: [[UInt8]], dontWait: Bool = false) throws(ZMQError) -> Bool {
        precondition(!frames.isEmpty, "a ZeroMQ message has at least one frame")
        let last = frames.count - 1
        for (index, frame) in frames.enumerated() {
            var flags: Int32 = dontWait ? ZMQ_DONTWAIT : 0
            if index < last { flags |= ZMQ_SNDMORE }
            while true {
                let rc = frame.withUnsafeBytes { zmq_send(handle, $0.baseAddress, $0.count, flags) }
                if rc >= 0 { break }
                let error = ZMQError.last("zmq_send")
                if error.isInterrupted { continue }
                if error.isWouldBlock && index == 0 { return false }
                throw error
            }
        }
        return true
    }

    /// Receives one whole message.
    ///
    /// - Parameters:
    ///   - dontWait: return `nil` at once when nothing is waiting instead of blocking.
    ///   - readUserID: also read the ZAP `User-Id` metadata of the message.
    ///   - readPeerAddress: also read the peer's IP address (`Peer-Address`, TCP only).
    public func receive(
        dontWait: Bool = false, readUserID: Bool = false, readPeerAddress: Bool = false
    ) throws(ZMQError) -> ZMQMessage? {
        var frames: [[UInt8]] = []
        var userID: String?
        var peerAddress: String?
        var message = zmq_msg_t()
        zmq_msg_init(&message)
        defer { zmq_msg_close(&message) }
        while true {
            let rc = zmq_msg_recv(&message, handle, dontWait || !frames.isEmpty ? ZMQ_DONTWAIT : 0)
            if rc < 0 {
                let error = ZMQError.last("zmq_msg_recv")
                if error.isInterrupted { continue }
                if error.isWouldBlock && frames.isEmpty { return nil }
                throw error
            }
            // Sky's messages have up to 9 frames: one allocation for the list, not four as it
            // grows (and none for the read that finds nothing).
            if frames.isEmpty { frames.reserveCapacity(9) }
            let size = zmq_msg_size(&message)
            if let data = zmq_msg_data(&message), size > 0 {
                frames.append(Array(UnsafeRawBufferPointer(start: data, count: size)))
            } else {
                frames.append([])
            }
            // A ROUTER makes up the routing-id frame itself; only the peer's own frames carry
            // its metadata, so look until one has it.
            if readUserID && userID == nil, let value = zmq_msg_gets(&message, "User-Id") {
                userID = String(cString: value)
            }
            if readPeerAddress && peerAddress == nil, let value = zmq_msg_gets(&message, "Peer-Address") {
                peerAddress = String(cString: value)
            }
            if zmq_msg_more(&message) == 0 { break }
        }
        return ZMQMessage(frames: frames, userID: userID, peerAddress: peerAddress)
    }

    /// Starts libzmq's socket monitor: events are published on a PAIR socket bound at `endpoint`
    /// (an `inproc://` address); connect a PAIR to it and decode with ``ZMQMonitorEvent/init(message:)``.
    public func startMonitor(endpoint: String, events: ZMQMonitorEvent.Kind.Set = .all) throws(ZMQError) {
        if zmq_socket_monitor(handle, endpoint, events.rawValue) != 0 {
            throw ZMQError.last("zmq_socket_monitor(\(endpoint))")
        }
    }
}
