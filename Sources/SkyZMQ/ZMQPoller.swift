import CZMQ

/// A `zmq_poll` set over sockets and plain file descriptors.
///
/// Not `Sendable`: it holds raw socket handles and is used by the thread that owns them.
package struct ZMQPoller {
    /// What to wait for on one item.
    package struct Events: OptionSet, Sendable {
        package let rawValue: Int16
        package init(rawValue: Int16) { self.rawValue = rawValue }
        package static let readable = Events(rawValue: Int16(ZMQ_POLLIN))
        package static let writable = Events(rawValue: Int16(ZMQ_POLLOUT))
    }

    private var items: [zmq_pollitem_t] = []

    package init() {}

    package var count: Int { items.count }

    /// Adds a socket and returns its index.
    @discardableResult
    package mutating func add(_ socket: ZMQSocket, events: Events) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: -1, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Adds a file descriptor (a pipe, an eventfd) and returns its index.
    @discardableResult
    package mutating func add(fileDescriptor: Int32, events: Events) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        return items.count - 1
    }

    /// Changes what item `index` waits for.
    package mutating func setEvents(_ events: Events, at index: Int) {
        items[index].events = events.rawValue
    }

    package mutating func removeAll() { items.removeAll(keepingCapacity: true) }

    /// Waits until an item is ready or `timeoutMilliseconds` pass (-1 waits forever).
    /// - Returns: the number of ready items; 0 on timeout or when interrupted by a signal.
    @discardableResult
    package mutating func poll(timeoutMilliseconds: Int) throws(ZMQError) -> Int {
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
    package func ready(at index: Int) -> Events {
        Events(rawValue: items[index].revents)
    }
}
