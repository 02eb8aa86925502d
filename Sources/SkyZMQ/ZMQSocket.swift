import CZMQ
import SkyWire

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

    /// Binds `endpoint`. An `ipc://` path another process listens on is refused as in use
    /// (`EADDRINUSE`), as a TCP port would be: libzmq would replace its socket file.
    public func bind(_ endpoint: String) throws(ZMQError) {
        if IPCListener.isListening(at: endpoint) {
            throw ZMQError(code: EADDRINUSE, operation: "zmq_bind(\(endpoint))")
        }
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

    /// What the socket can do now (`ZMQ_EVENTS`). Reading it also takes libzmq's pending
    /// commands, which resets ``signalDescriptor``.
    public var readiness: ZMQPoller.Events { ZMQPoller.Events(rawValue: Int16(truncatingIfNeeded: events)) }

    /// The descriptor libzmq signals when ``readiness`` may have changed (`ZMQ_FD`). It is
    /// edge-triggered and says nothing by itself: after it turns readable, and after every
    /// send or receive on the socket, ``readiness`` tells what the socket can do.
    public var signalDescriptor: Int32 {
        var value: Int32 = -1
        var size = MemoryLayout<Int32>.size
        guard zmq_getsockopt(handle, ZMQ_FD, &value, &size) == 0 else { return -1 }
        return value
    }

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
            let sent = frame.withUnsafeBytes { bytes in
                Result { () throws(ZMQError) in
                    try sendFrame(bytes, first: index == 0, last: index == last, dontWait: dontWait)
                }
            }
            if try !sent.get() { return false }
        }
        return true
    }

    /// Sends a message built in one buffer, each frame straight from it.
    @discardableResult
    public func send(_ message: Frames, dontWait: Bool = false) throws(ZMQError) -> Bool {
        precondition(!message.isEmpty, "a ZeroMQ message has at least one frame")
        return try send(eachFrameOf: message, dontWait: dontWait)
    }

    /// Sends a message each frame straight from the memory that holds it.
    @discardableResult
    public func send(_ message: FrameParts, dontWait: Bool = false) throws(ZMQError) -> Bool {
        try send(eachFrameOf: message, dontWait: dontWait)
    }

    /// Sends the frames `message` lends, stopping at the first that fails.
    private func send(eachFrameOf message: borrowing some FrameSource, dontWait: Bool) throws(ZMQError) -> Bool {
        var outcome: Result<Bool, ZMQError> = .success(true)
        var first = true
        message.forEachFrame { frame, isLast in
            do throws(ZMQError) {
                guard try sendFrame(frame, first: first, last: isLast, dontWait: dontWait) else {
                    outcome = .success(false)
                    return false
                }
            } catch {
                outcome = .failure(error)
                return false
            }
            first = false
            return true
        }
        return try outcome.get()
    }

    /// Sends a message in either form.
    @discardableResult
    public func send(_ content: ZMQEventLoop.Outbound.Content, dontWait: Bool = false) throws(ZMQError) -> Bool {
        switch content {
        case .arrays(let frames): try send(frames, dontWait: dontWait)
        case .frames(let message): try send(message, dontWait: dontWait)
        }
    }

    /// One frame of a message; `false` when the first would block (nothing was sent then).
    private func sendFrame(
        _ bytes: UnsafeRawBufferPointer, first: Bool, last: Bool, dontWait: Bool
    ) throws(ZMQError) -> Bool {
        var flags: Int32 = dontWait ? ZMQ_DONTWAIT : 0
        if !last { flags |= ZMQ_SNDMORE }
        while zmq_send(handle, bytes.baseAddress, bytes.count, flags) < 0 {
            let error = ZMQError.last("zmq_send")
            if error.isInterrupted { continue }
            if error.isWouldBlock && first { return false }
            throw error
        }
        return true
    }

    /// Frames of a message held as libzmq messages on the stack before they are copied into
    /// one buffer; longer messages (a READY naming many services) go on the heap.
    private static let stackFrames = 12

    /// Receives one whole message, copied into one buffer (one allocation, see ``Frames``).
    ///
    /// - Parameters:
    ///   - dontWait: return `nil` at once when nothing is waiting instead of blocking.
    ///   - readUserID: also read the ZAP `User-Id` metadata of the message.
    ///   - readPeerAddress: also read the peer's IP address (`Peer-Address`, TCP only).
    ///   - peerAddressFilter: read the address only of messages it takes (otherwise every
    ///     message pays a metadata lookup and a string).
    ///
    /// Always inlined, with ``receiveParts(into:dontWait:readUserID:readPeerAddress:peerAddressFilter:)``,
    /// into the event loop's read: with the sizes' buffer beside the messages' the optimiser left
    /// both calls, each message.
    @inline(__always) public func receive(
        dontWait: Bool = false, readUserID: Bool = false, readPeerAddress: Bool = false,
        peerAddressFilter: ((Frames) -> Bool)? = nil
    ) throws(ZMQError) -> ZMQMessage? {
        var noPool: FrameBufferPool? = nil
        return try receive(
            dontWait: dontWait, readUserID: readUserID, readPeerAddress: readPeerAddress,
            peerAddressFilter: peerAddressFilter, pool: &noPool)
    }

    /// ``receive(dontWait:readUserID:readPeerAddress:peerAddressFilter:)``, the message written
    /// into a buffer of `pool`'s if it has one (the I/O thread's, for its inline handler).
    @inline(__always) public func receive(
        dontWait: Bool = false, readUserID: Bool = false, readPeerAddress: Bool = false,
        peerAddressFilter: ((Frames) -> Bool)? = nil, pool: inout FrameBufferPool?
    ) throws(ZMQError) -> ZMQMessage? {
        let outcome = withUnsafeTemporaryAllocation(of: zmq_msg_t.self, capacity: Self.stackFrames) { stack in
            withUnsafeTemporaryAllocation(of: Int.self, capacity: Self.stackFrames) { sizes in
                var parts = Parts(stack: stack, sizes: sizes)
                defer { parts.closeAll() }
                return Result { () throws(ZMQError) -> ZMQMessage? in
                    try receiveParts(
                        into: &parts, dontWait: dontWait, readUserID: readUserID, readPeerAddress: readPeerAddress,
                        peerAddressFilter: peerAddressFilter, pool: &pool)
                }
            }
        }
        return try outcome.get()
    }

    @inline(__always) private func receiveParts(
        into parts: inout Parts, dontWait: Bool, readUserID: Bool, readPeerAddress: Bool,
        peerAddressFilter: ((Frames) -> Bool)?, pool: inout FrameBufferPool?
    ) throws(ZMQError) -> ZMQMessage? {
        var userID: String?
        var bytes = 0
        var total = 0
        while true {
            let message = parts.next()
            let rc = zmq_msg_recv(message, handle, dontWait || parts.count > 1 ? ZMQ_DONTWAIT : 0)
            if rc < 0 {
                parts.dropLast()
                let error = ZMQError.last("zmq_msg_recv")
                if error.isInterrupted { continue }
                if error.isWouldBlock && parts.count == 0 { return nil }
                throw error
            }
            // zmq_msg_recv's result is the size (capped at Int32.max): asking libzmq again, here
            // and when copying, cost two calls a frame.
            let size = rc < Int32.max ? Int(rc) : zmq_msg_size(message)
            parts.recordSize(size)
            bytes += Frames.inlineSize(size)
            total += size
            // A ROUTER makes up the routing-id frame itself; only the peer's own frames carry
            // its metadata, so look until one has it.
            if readUserID && userID == nil, let value = zmq_msg_gets(message, "User-Id") {
                userID = String(cString: value)
            }
            if zmq_msg_more(message) == 0 { break }
        }
        let content = Frames(copying: parts.count, smallBytes: bytes, pool: &pool) { index in
            UnsafeRawBufferPointer(start: zmq_msg_data(parts[index]), count: parts.size(of: index))
        }
        var peerAddress: String?
        if readPeerAddress && peerAddressFilter?(content) != false {
            for index in 0..<parts.count {
                if let value = zmq_msg_gets(parts[index], "Peer-Address") {
                    peerAddress = String(cString: value)
                    break
                }
            }
        }
        return ZMQMessage(content: content, byteCount: total, userID: userID, peerAddress: peerAddress)
    }

    /// Starts libzmq's socket monitor: events are published on a PAIR socket bound at `endpoint`
    /// (an `inproc://` address); connect a PAIR to it and decode with ``ZMQMonitorEvent/init(message:)``.
    public func startMonitor(endpoint: String, events: ZMQMonitorEvent.Kind.Set = .all) throws(ZMQError) {
        if zmq_socket_monitor(handle, endpoint, events.rawValue) != 0 {
            throw ZMQError.last("zmq_socket_monitor(\(endpoint))")
        }
    }

    /// Stops the monitor: libzmq closes its end of the pair and sends no more events. Call it
    /// before closing the reading end: libzmq sends each event with a blocking send from its
    /// own I/O thread, so an event sent to a pair nobody reads (a disconnection while the socket
    /// closes) blocks that thread for good, and with it every socket of the context.
    public func stopMonitor() {
        _ = zmq_socket_monitor(handle, nil, 0)
    }
}

/// The libzmq messages of one multipart message being received, each initialised when taken
/// and closed by ``closeAll()``: in the caller's stack buffer up to its size, then on the heap.
private struct Parts {
    private let stack: UnsafeMutableBufferPointer<zmq_msg_t>
    /// Each received frame's size, beside its message (``recordSize(_:)``).
    private let stackSizes: UnsafeMutableBufferPointer<Int>
    private var heap: UnsafeMutablePointer<zmq_msg_t>?
    private var heapSizes: UnsafeMutablePointer<Int>?
    private var heapCapacity = 0
    private(set) var count = 0

    init(stack: UnsafeMutableBufferPointer<zmq_msg_t>, sizes: UnsafeMutableBufferPointer<Int>) {
        precondition(sizes.count >= stack.count, "a size for each message on the stack")
        self.stack = stack
        stackSizes = sizes
    }

    /// Keeps the size of the last message, which received it.
    mutating func recordSize(_ size: Int) {
        let index = count - 1
        if index < stack.count {
            stackSizes[index] = size
        } else {
            heapSizes![index - stack.count] = size
        }
    }

    /// The size ``recordSize(_:)`` kept for message `index`.
    func size(of index: Int) -> Int {
        index < stack.count ? stackSizes[index] : heapSizes![index - stack.count]
    }

    /// A new empty message after the others.
    mutating func next() -> UnsafeMutablePointer<zmq_msg_t> {
        if count >= stack.count + heapCapacity { grow() }
        let message = self[count]
        zmq_msg_init(message)
        count += 1
        return message
    }

    /// Closes the last message (one that received nothing).
    mutating func dropLast() {
        count -= 1
        zmq_msg_close(self[count])
    }

    subscript(index: Int) -> UnsafeMutablePointer<zmq_msg_t> {
        index < stack.count ? stack.baseAddress! + index : heap! + (index - stack.count)
    }

    func closeAll() {
        for index in 0..<count { zmq_msg_close(self[index]) }
        heap?.deallocate()
        heapSizes?.deallocate()
    }

    /// A `zmq_msg_t` may be moved bit for bit (`zmq_msg_move` does no more), so the heap part
    /// grows like an array's storage.
    private mutating func grow() {
        let capacity = max(16, heapCapacity * 2)
        let bigger = UnsafeMutablePointer<zmq_msg_t>.allocate(capacity: capacity)
        let biggerSizes = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
        if let heap, let heapSizes {
            bigger.moveInitialize(from: heap, count: count - stack.count)
            biggerSizes.moveInitialize(from: heapSizes, count: count - stack.count)
            heap.deallocate()
            heapSizes.deallocate()
        }
        heap = bigger
        heapSizes = biggerSizes
        heapCapacity = capacity
    }
}
