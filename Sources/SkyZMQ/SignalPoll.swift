#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The descriptors an I/O thread sleeps on: its wake-up descriptor, then for each socket its
/// signalling descriptor (``ZMQSocket/signalDescriptor``) and its monitor's (-1 without one).
///
/// The thread polls these itself instead of calling `zmq_poll`, which asked every socket for
/// its descriptor and its events before and after each sleep (several `zmq_getsockopt` calls
/// per wake-up). The thread asks a socket for its events only when its descriptor fired or the
/// thread used it (see ``ZMQEventLoopRunner``).
struct SignalPoll {
    private var items: [pollfd] = []

    /// Sets the descriptors: the wake-up one, then two per socket.
    mutating func reset(wake: Int32, sockets: [(socket: Int32, monitor: Int32)]) {
        items.removeAll(keepingCapacity: true)
        items.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
        for pair in sockets {
            items.append(pollfd(fd: pair.socket, events: Int16(POLLIN), revents: 0))
            // A negative descriptor is skipped by poll(2) and never fires.
            items.append(pollfd(fd: pair.monitor, events: Int16(POLLIN), revents: 0))
        }
    }

    /// Sleeps until a descriptor is readable or `timeoutMilliseconds` pass (-1: no limit).
    /// - Returns: false when polling failed for a reason other than a signal (the thread
    ///   cannot go on).
    mutating func wait(timeoutMilliseconds: Int) -> Bool {
        let count = nfds_t(items.count)
        let rc = items.withUnsafeMutableBufferPointer { items in
            #if canImport(Glibc)
                Glibc.poll(items.baseAddress, count, Int32(timeoutMilliseconds))
            #else
                Darwin.poll(items.baseAddress, count, Int32(timeoutMilliseconds))
            #endif
        }
        if rc < 0 {
            for index in items.indices { items[index].revents = 0 }
            return errno == EINTR
        }
        return true
    }

    /// Whether the wake-up descriptor fired in the last ``wait(timeoutMilliseconds:)``.
    var wakeFired: Bool { items[0].revents != 0 }

    /// Whether socket `index`'s descriptor fired in the last wait.
    func socketFired(_ index: Int) -> Bool { items[1 + index * 2].revents != 0 }

    /// Whether the monitor of socket `index` fired in the last wait.
    func monitorFired(_ index: Int) -> Bool { items[2 + index * 2].revents != 0 }
}
