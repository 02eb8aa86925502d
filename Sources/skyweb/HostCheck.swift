/// Which `Host` names the dashboard answers to: an IP address, `localhost`, or a name given with
/// `--allow-host`.
///
/// The page has no login, and a browser sends a page's requests to whatever address its name
/// resolves to: a site whose name is made to resolve to 127.0.0.1 after the page loaded (DNS
/// rebinding) would be the dashboard's own origin, so its script could read the cluster's state
/// and cancel or retry jobs, custom header and all. Its requests still carry its own name in
/// `Host`, which is what this checks (measured before: `Host: rebind.attacker.example` got the
/// state and reached the broker with a cancel).
struct HostCheck: Sendable {
    /// Names allowed besides addresses and `localhost`, lowercased.
    let names: Set<String>

    init(allowing names: [String]) {
        self.names = Set(names.map { $0.lowercased() })
    }

    /// Whether a request with this `Host` header is answered. Without one (HTTP/1.0 tools; no
    /// browser sends that) it is.
    func admits(_ header: String?) -> Bool {
        guard let header else { return true }
        let name = Self.name(of: header.lowercased())
        if name.hasPrefix("[") || Self.isIPv4(name) { return true }
        return name == "localhost" || name.hasSuffix(".localhost") || names.contains(name)
    }

    /// The name in a `Host` header, without its port (`[v6]` addresses keep their brackets).
    static func name(of header: String) -> String {
        if header.hasPrefix("["), let end = header.firstIndex(of: "]") { return String(header[...end]) }
        guard let colon = header.lastIndex(of: ":") else { return header }
        return String(header[..<colon])
    }

    private static func isIPv4(_ name: String) -> Bool {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }
}
