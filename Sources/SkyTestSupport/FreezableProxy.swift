import Foundation
import SkyZMQ

/// A TCP proxy on a free loopback port in front of `127.0.0.1:target`, which a test can
/// freeze: from then on nothing more is passed either way, while every connection stays open,
/// as across a network partition or to a server that hangs. Tests put it between a broker and
/// its PostgreSQL server.
///
/// Blocking sockets, one thread per direction of each connection: a test makes a handful.
public final class FreezableProxy: @unchecked Sendable {  // its `var`s are guarded by `condition`.
    public let port: Int
    private let listener: Int32
    private let target: Int
    /// Guards `frozen`, `stopped` and `sockets`; pumps wait on it while frozen.
    private let condition = NSCondition()
    private var frozen = false
    private var stopped = false
    private var sockets: [Int32] = []

    public init(target: Int) throws {
        self.target = target
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(listener, 16) == 0 else {
            close(listener)
            throw ProxyError(description: "cannot listen on loopback: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        self.listener = listener
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    public struct ProxyError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Nothing more passes, either way; connections stay open.
    public func freeze() {
        condition.lock()
        frozen = true
        condition.unlock()
    }

    /// Closes the listener and every connection.
    public func stop() {
        condition.lock()
        stopped = true
        let open = sockets
        condition.broadcast()
        condition.unlock()
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        // The pumps see the end of their sockets and close them (``pump(from:to:done:)``).
        for socket in open { shutdown(socket, Int32(SHUT_RDWR)) }
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: UInt16(target))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            condition.lock()
            let kept = !stopped && connected == 0
            if kept { sockets += [client, server] }
            condition.unlock()
            guard kept else {
                close(client)
                close(server)
                continue
            }
            // The second pump to end closes both sockets.
            let ended = Locked(0)
            let done: @Sendable () -> Void = { [self] in
                guard
                    ended.withLock({
                        $0 += 1; return $0
                    }) == 2
                else { return }
                condition.lock()
                sockets.removeAll { $0 == client || $0 == server }
                condition.unlock()
                close(client)
                close(server)
            }
            Thread { [self] in pump(from: client, to: server, done: done) }.start()
            Thread { [self] in pump(from: server, to: client, done: done) }.start()
        }
    }

    /// Passes bytes from one socket to the other until either closes; frozen, it holds what it
    /// read and reads no more until the proxy stops.
    private func pump(from source: Int32, to sink: Int32, done: @Sendable () -> Void) {
        defer { done() }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            condition.lock()
            while frozen && !stopped { condition.wait() }
            let ended = stopped
            condition.unlock()
            guard !ended else { return }
            var sent = 0
            while sent < count {
                let wrote = buffer.withUnsafeBytes { write(sink, $0.baseAddress! + sent, count - sent) }
                guard wrote > 0 else { return }
                sent += wrote
            }
        }
        shutdown(sink, Int32(SHUT_WR))
    }
}
