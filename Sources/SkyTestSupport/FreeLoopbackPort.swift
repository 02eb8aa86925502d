import Foundation

/// A loopback TCP port nobody listens on now: the kernel's pick for a socket bound to port 0,
/// read back and released (for a program that takes a port number, not port 0).
public func freeLoopbackPort() throws -> Int {
    let socket = Foundation.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0
        }
    }
    guard bound else {
        throw SkyProcess.Timeout(description: "no free loopback port: \(String(cString: strerror(errno)))")
    }
    return Int(UInt16(bigEndian: address.sin_port))
}
