import Foundation

/// A `skybroker` that printed its ready line, with the endpoints it bound (real ports where `*`
/// was asked for). Tests and the benchmark start brokers this one way.
public struct StartedBroker: Sendable {
    public let process: SkyProcess
    public let clients: String
    public let workers: String
    public let events: String

    /// Starts `skybroker` on the given endpoints and waits for its ready line; a broker that
    /// never gets ready is killed before the error is thrown.
    /// - Parameters:
    ///   - launcher: a program and its arguments that run the broker, the broker's path last
    ///     (valgrind, for example); the broker's arguments follow. Its start may take longer.
    ///   - environment: variables set for the launcher (or the broker, without one).
    public static func start(
        clients: String = "tcp://127.0.0.1:*", workers: String = "tcp://127.0.0.1:*",
        events: String = "tcp://127.0.0.1:*", arguments: [String] = [], namespace: String? = nil,
        launcher: [String] = [], environment: [String: String] = [:]
    ) async throws -> StartedBroker {
        // Without a state directory of its own a broker would take ~/.local/state/sky, which parallel
        // tests would share (the second broker is refused its lock): no journal unless asked (a
        // state directory or a PostgreSQL store).
        let journal =
            arguments.contains { ["--state-dir", "--store"].contains($0.split(separator: "=").first ?? "") }
            ? [] : ["--state-dir", "none"]
        let arguments = ["--clients", clients, "--workers", workers, "--events", events] + journal + arguments
        let process: SkyProcess
        if let program = launcher.first {
            process = try SkyProcess(
                program: URL(fileURLWithPath: program), launcher.dropFirst() + arguments, name: "skybroker",
                namespace: namespace, environment: environment)
        } else {
            process = try SkyProcess("skybroker", arguments, namespace: namespace, environment: environment)
        }
        let ready: String
        do {
            ready = try await process.waitForLine(timeout: launcher.isEmpty ? .seconds(20) : .seconds(120)) {
                $0.hasPrefix("skybroker ready ")
            }
        } catch {
            process.killNow()
            throw error
        }
        // "skybroker ready clients=... workers=... events=..."
        var bound: [String: String] = [:]
        for word in ready.split(separator: " ") {
            guard let equals = word.firstIndex(of: "=") else { continue }
            bound[String(word[..<equals])] = String(word[word.index(after: equals)...])
        }
        return StartedBroker(
            process: process, clients: bound["clients"] ?? clients, workers: bound["workers"] ?? workers,
            events: bound["events"] ?? events)
    }
}

extension SkyProcess {
    /// Kills every process at once, then waits (up to 5 s each) until they are gone.
    public static func killAll(_ processes: [SkyProcess]) async {
        for process in processes { process.killNow() }
        for process in processes { _ = try? await process.waitForExit(timeout: .seconds(5)) }
    }
}
