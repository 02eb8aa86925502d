import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback TCP port that accepts connections and never says a word, as an HTTP server
/// waiting for a request line does: another kind of server where a broker was expected.
struct SilentListener {
    let endpoint: String
    private let descriptor: Int32

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                bind(listener, address, length) == 0 && listen(listener, 16) == 0
                    && getsockname(listener, address, &length) == 0
            }
        }
        guard listener >= 0, bound else {
            if listener >= 0 { Glibc.close(listener) }
            throw SilentListenerError()
        }
        descriptor = listener
        endpoint = "tcp://127.0.0.1:\(UInt16(bigEndian: address.sin_port))"
    }

    func close() { Glibc.close(descriptor) }
}

struct SilentListenerError: Error, CustomStringConvertible {
    var description: String { "could not listen on a loopback port" }
}
