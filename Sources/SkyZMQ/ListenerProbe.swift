#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Whether a process now accepts connections at another broker's ZeroMQ endpoint, asked with a
/// plain connect that is closed at once.
///
/// A standby broker binds its sockets only once it is active, so an active broker cut off from
/// the job store learns from this, without the store, that a standby has taken over. The
/// address is resolved when the probe is made (while the store, and so most likely the name
/// service, is reachable), so that asking never waits on a name lookup.
public struct ListenerProbe: Sendable, Hashable {
    private enum Target: Sendable, Hashable {
        /// A socket address's bytes (`sockaddr_in` or `sockaddr_in6`).
        case tcp(family: Int32, address: [UInt8])
        case ipc(String)
    }

    private let target: Target

    /// The probe of `endpoint` as bound on `host`, or `nil` when it cannot be asked: a port the
    /// kernel picks (`*`, `!`), an interface name, a name that does not resolve, an abstract
    /// `ipc://@…` name, an `ipc://` path on another host, or another transport.
    /// - Parameters:
    ///   - endpoint: as the other broker was given it (`tcp://*:5555`, `ipc:///run/sky/c`).
    ///   - host: the other broker's host name, which stands in for a wildcard address
    ///     (`*`, `0.0.0.0`, `[::]`).
    ///   - localHost: this host's name: an `ipc://` path is asked only on the same host.
    public init?(endpoint: String, host: String, localHost: String) {
        if endpoint.hasPrefix("ipc://") {
            guard host == localHost, IPCListener.canAsk(endpoint) else { return nil }
            target = .ipc(endpoint)
            return
        }
        guard endpoint.hasPrefix("tcp://") else { return nil }
        let hostAndPort = endpoint.dropFirst(6)
        guard let colon = hostAndPort.lastIndex(of: ":") else { return nil }
        var address = String(hostAndPort[..<colon])
        let port = String(hostAndPort[hostAndPort.index(after: colon)...])
        guard let number = UInt16(port), number > 0, !address.contains(";") else { return nil }
        if address.hasPrefix("["), address.hasSuffix("]") { address = String(address.dropFirst().dropLast()) }
        if ["*", "0.0.0.0", "::", ""].contains(address) { address = host }
        guard let resolved = Self.resolve(address, port: port) else { return nil }
        target = resolved
    }

    /// `true` when something accepted the connection within `timeout`; `false` when it was
    /// refused, or nothing answered in time.
    public func isListening(within timeout: Duration) -> Bool {
        switch target {
        case .ipc(let endpoint):
            return IPCListener.isListening(at: endpoint)
        case .tcp(let family, let address):
            guard let descriptor = nonBlockingStreamSocket(family: family) else { return false }
            defer { close(descriptor) }
            let started = address.withUnsafeBytes { bytes in
                connect(
                    descriptor, bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(bytes.count))
            }
            if started == 0 { return true }
            guard errno == EINPROGRESS else { return false }
            var waiting = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
            let milliseconds = Int32(
                clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
            guard poll(&waiting, 1, max(1, milliseconds)) == 1 else { return false }
            var failure: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(descriptor, SOL_SOCKET, SO_ERROR, &failure, &length) == 0 else { return false }
            return failure == 0
        }
    }

    /// The first stream address of `host` (a numeric address or a name) and `port`.
    private static func resolve(_ host: String, port: String) -> Target? {
        var hints = addrinfo()
        #if os(Linux)
            hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
            hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, port, &hints, &list) == 0, let first = list else { return nil }
        defer { freeaddrinfo(list) }
        guard let address = first.pointee.ai_addr, first.pointee.ai_addrlen > 0 else { return nil }
        let bytes = Array(UnsafeRawBufferPointer(start: address, count: Int(first.pointee.ai_addrlen)))
        return .tcp(family: first.pointee.ai_family, address: bytes)
    }
}
