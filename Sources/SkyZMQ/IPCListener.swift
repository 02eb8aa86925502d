#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Whether a process listens on the Unix socket of an `ipc://` endpoint.
///
/// libzmq's bind of an `ipc://` path removes an existing socket file and takes its place, so a
/// second broker started on the same paths silently took the first one's new connections while
/// the first went on running (measured: no error, both "ready"). A TCP port cannot be bound
/// twice; Sky's bind asks first so that a path cannot either.
enum IPCListener {
    /// Whether `endpoint` names a socket path that can be asked (not an abstract name or `*`).
    static func canAsk(_ endpoint: String) -> Bool {
        guard endpoint.hasPrefix("ipc://") else { return false }
        let path = endpoint.utf8.dropFirst(6)
        guard let first = path.first else { return false }
        return first != UInt8(ascii: "@") && !path.elementsEqual("*".utf8)
    }

    /// `true` when something accepts connections at `endpoint`'s path. Abstract names (`@…`)
    /// and `*` are left to the kernel and libzmq; a stale socket file nobody listens on is not
    /// in use (libzmq replaces it, as it should).
    static func isListening(at endpoint: String) -> Bool {
        guard canAsk(endpoint) else { return false }
        let path = Array(endpoint.utf8.dropFirst(6))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        // Too long for a socket path: the bind fails with its own error.
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: path)
            buffer[path.count] = 0
        }
        // Non-blocking: a listener whose backlog is full answers EAGAIN at once, and is in use.
        guard let descriptor = nonBlockingStreamSocket(family: AF_UNIX) else { return false }
        defer { close(descriptor) }
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return connected == 0 || errno == EAGAIN
    }
}

/// A stream socket that does not block, closed on exec; `nil` if the system has none to give.
func nonBlockingStreamSocket(family: Int32) -> Int32? {
    #if os(Linux)
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
    #else
        let descriptor = socket(family, SOCK_STREAM, 0)
        if descriptor >= 0 { _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK) }
    #endif
    return descriptor >= 0 ? descriptor : nil
}
