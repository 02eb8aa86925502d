import CZMQ

/// A `zmq_poll` set over sockets and plain file descriptors.
///
/// Not `Sendable`: it holds raw socket handles and is used by the thread that owns them.
public struct ZMQPoller {
    /// What to wait for on one item.
    public struct Events: OptionSet, Sendable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }
        public static let readable = Events(rawValue: Int16(ZMQ_POLLIN))
        public static let writable = Events(rawValue: Int16(ZMQ_POLLOUT))
    }

    private var items: [zmq_pollitem_t] = []

    public init() {}

    public var count: Int { items.count }

    /// Adds a socket and returns its index.
    @discardableResult
    public mutating func add(_ socket: ZMQSocket, events: Events) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: -1, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Adds a file descriptor (a pipe, an eventfd) and returns its index.
    @discardableResult
    public mutating func add(fileDescriptor: Int32, events: Events) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Changes what item `index` waits for.
    public mutating func setEvents(_ events: Events, at index: Int) {
        items[index].events = events.rawValue
    }

    public mutating func removeAll() { items.removeAll(keepingCapacity: true) }

    /// Waits until an item is ready or `timeoutMilliseconds` pass (-1 waits forever).
    /// - Returns: the number of ready items; 0 on timeout or when interrupted by a signal.
    @discardableResult
    public mutating func poll(timeoutMilliseconds: Int) throws(ZMQError) -> Int {
        let count = Int32(items.count)
        let rc = items.withUnsafeMutableBufferPointer { zmq_poll($0.baseAddress, count, timeoutMilliseconds) }
        if rc < 0 {
            let error = ZMQError.last("zmq_poll")
            if error.isInterrupted { return 0 }
            throw error
        }
        return Int(rc)
    }

    /// What item `index` is ready for after the last ``poll(timeoutMilliseconds:)``.
    public func ready(at index: Int) -> Events {
        Events(rawValue: items[index].revents)
    }
}
