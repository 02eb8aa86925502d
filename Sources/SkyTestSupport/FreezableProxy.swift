import Foundation
import SkyZMQ

/// A TCP proxy on a free loopback port in front of `127.0.0.1:target`, which a test can
/// freeze: from then on nothing more is passed either way, while every connection stays open,
/// as across a network partition or to a server that hangs. Tests put it between a broker and
/// its PostgreSQL server.
///
/// Blocking sockets, one thread per direction of each connection: a test makes a handful.
public final class FreezableProxy: Sendable {
    public let port: Int
    private let listener: Int32
    private let target: Int
    private let state = Locked(State())

    private struct State {
        var frozen = false
        var stopped = false
        var sockets: [Int32] = []
    }

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
        state.withLock { $0.frozen = true }
    }

    /// Closes the listener and every connection.
    public func stop() {
        let sockets = state.withLock { state in
            state.stopped = true
            return state.sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for socket in sockets { shutdown(socket, Int32(SHUT_RDWR)) }
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
            let kept = state.withLock { state in
                guard !state.stopped else { return false }
                state.sockets += [client, server]
                return true
            }
            guard connected == 0, kept else {
                close(client)
                close(server)
                continue
            }
            Thread { [self] in pump(from: client, to: server) }.start()
            Thread { [self] in pump(from: server, to: client) }.start()
        }
    }

    /// Passes bytes from one socket to the other until either closes; frozen, it holds what it
    /// read and reads no more.
    private func pump(from source: Int32, to sink: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            while state.withLock({ $0.frozen && !$0.stopped }) { usleep(10_000) }
            guard !state.withLock({ $0.stopped }) else { break }
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
