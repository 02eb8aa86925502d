import Foundation

/// ZeroMQ endpoints as Sky's programs and its Swift API take them, checked before libzmq sees
/// them: libzmq answers `localhost:5555` with "Invalid argument" and nothing more.
public enum ZMQEndpoint {
    /// Why `value` is not an endpoint libzmq can use (`tcp://HOST:PORT`, `*` for the host or the
    /// port only when binding; `ipc://PATH`; `inproc://NAME`); `nil` when it is.
    public static func problem(_ value: String, binding: Bool) -> String? {
        guard let separator = value.range(of: "://") else {
            return "no transport: expected tcp://, ipc:// or inproc://"
        }
        let transport = value[..<separator.lowerBound]
        let address = value[separator.upperBound...]
        switch transport {
        case "ipc", "inproc":
            return address.isEmpty ? "no \(transport) path" : nil
        case "tcp":
            guard let (host, port) = tcpAddress(value) else { return "no port" }
            if host.isEmpty { return "no host" }
            if host == "*" && !binding { return "* as host only works when binding" }
            if port == "*" { return binding ? nil : "* as port only works when binding" }
            guard let number = Int(port), (1...65_535).contains(number) else {
                // Port 0 means "any free port" to many tools; here that is `*`.
                let free = binding && port == "0" ? " (for a free port, write * as the port)" : ""
                return "port \(port) is not 1...65535\(free)"
            }
            return nil
        default:
            return "unknown transport \(transport); use tcp, ipc or inproc"
        }
    }

    /// The host and port of a `tcp://HOST:PORT` endpoint; `nil` for another transport or without
    /// a port.
    static func tcpAddress(_ value: String) -> (host: Substring, port: Substring)? {
        guard value.hasPrefix("tcp://") else { return nil }
        let address = value.dropFirst(6)
        guard let colon = address.lastIndex(of: ":") else { return nil }
        return (address[..<colon], address[address.index(after: colon)...])
    }

    /// Whether binding both would take the same address: the same `ipc://` path or `inproc://`
    /// name, or the same TCP port on the same host or on every host (`*`); a port of `*` is a
    /// free port each time.
    public static func sameBinding(_ first: String, _ second: String) -> Bool {
        guard let a = tcpAddress(first), let b = tcpAddress(second) else { return first == second }
        guard a.port != "*", a.port == b.port else { return false }
        return a.host == b.host || everyHost.contains(a.host) || everyHost.contains(b.host)
    }

    /// The hosts that name every interface in a bound endpoint (libzmq reports `*` as `0.0.0.0`).
    static let everyHost: Set<Substring> = ["*", "0.0.0.0", "::", "[::]"]

    /// A bound endpoint as a peer reaches it: a host of every interface replaced by the host of
    /// `via`, an endpoint the peer reaches the same process at; any other endpoint as it is.
    public static func reachable(_ bound: String, via: String) -> String {
        guard let address = tcpAddress(bound), everyHost.contains(address.host), let peer = tcpAddress(via) else {
            return bound
        }
        return "tcp://\(peer.host):\(address.port)"
    }

    /// The one-line advice for an endpoint with `problem`.
    public static func advice(_ value: String, problem: String, binding: Bool = false) -> String {
        // The value's own host and port when it has them (`localhost:5556` is
        // `tcp://localhost:5556`): a worker told the clients port 5555 was sent the wrong way.
        var example = binding ? "tcp://127.0.0.1:5555 or tcp://*:5555" : "tcp://127.0.0.1:5555"
        if !value.contains("://"), let address = tcpAddress("tcp://" + value), let port = Int(address.port),
            (1...65535).contains(port)
        {
            example = "tcp://\(address.host.isEmpty ? "127.0.0.1" : address.host):\(port)"
        }
        let shown = value.isEmpty ? "an empty string" : value
        return "\(shown) is not a ZeroMQ endpoint (\(problem)); write it like \(example)"
    }
}
