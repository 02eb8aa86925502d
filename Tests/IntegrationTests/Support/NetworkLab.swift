import Foundation
import SkyZMQ

/// Hosts made of Linux network namespaces on one bridge: each "host" is a namespace with one
/// interface `eth0` at 10.99.0.N/24, wired by a veth pair to a bridge in a hub namespace.
/// Needs root; ``deleteAll()`` (safe in `defer`) removes every namespace it made, and with them
/// their interfaces.
final class NetworkLab: Sendable {
    struct CommandFailed: Error, CustomStringConvertible {
        let description: String
    }

    static let ip = "/usr/sbin/ip"

    /// Whether namespaces can be made here (root, iproute2, kernel support): tried once.
    static let available: Bool = {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: ip) else { return false }
        let probe = "sky-probe-\(getpid())"
        guard (try? run([ip, "netns", "add", probe])) != nil else { return false }
        _ = try? run([ip, "netns", "delete", probe])
        return true
    }()

    /// Why the lab is unavailable, for the skipped test's message.
    static let unavailableReason =
        getuid() != 0
        ? "network namespaces need root" : "cannot create network namespaces here (iproute2 or kernel support missing)"

    let prefix: String
    private let hub: String
    private let made = Locked<[String]>([])

    init() throws {
        prefix = "sky\(String(UInt32.random(in: 0..<0xFFFF), radix: 16))"
        hub = "\(prefix)-hub"
        try Self.run([Self.ip, "netns", "add", hub])
        made.withLock { $0.append(hub) }
        try Self.run([Self.ip, "-n", hub, "link", "add", "br0", "type", "bridge"])
        try Self.run([Self.ip, "-n", hub, "link", "set", "br0", "up"])
    }

    /// Makes host number `number` (1...254) and returns its namespace name.
    func addHost(_ number: Int) throws -> String {
        let namespace = "\(prefix)-\(number)"
        let outside = "\(prefix)h\(number)"
        try Self.run([Self.ip, "netns", "add", namespace])
        made.withLock { $0.append(namespace) }
        try Self.run([
            Self.ip, "-n", hub, "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace,
        ])
        try Self.run([Self.ip, "-n", hub, "link", "set", outside, "master", "br0", "up"])
        try Self.run([Self.ip, "-n", namespace, "addr", "add", "\(Self.address(number))/24", "dev", "eth0"])
        try Self.run([Self.ip, "-n", namespace, "link", "set", "eth0", "up"])
        try Self.run([Self.ip, "-n", namespace, "link", "set", "lo", "up"])
        return namespace
    }

    static func address(_ number: Int) -> String { "10.99.0.\(number)" }

    /// Takes a host's link down or up: from its side nothing gets in or out.
    func setLink(of number: Int, up: Bool) throws {
        try Self.run([Self.ip, "-n", "\(prefix)-\(number)", "link", "set", "eth0", up ? "up" : "down"])
    }

    func deleteAll() {
        for namespace in made.withLock({ $0 }).reversed() {
            _ = try? Self.run([Self.ip, "netns", "delete", namespace])
        }
        made.withLock { $0 = [] }
    }

    @discardableResult
    static func run(_ command: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("sky-lab-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
        try process.run()
        process.waitUntilExit()
        try? handle.close()
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        guard process.terminationStatus == 0 else {
            throw CommandFailed(description: "\(command.joined(separator: " ")) failed: \(output)")
        }
        return output
    }
}
