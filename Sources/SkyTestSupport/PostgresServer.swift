import Foundation
import SkyZMQ

/// A real PostgreSQL server for one test: Debian's `postgresql` package, a new cluster in a
/// temporary directory (a copy of one `initdb` made per test process), listening on a free loopback port and on a socket in that directory,
/// trusting local connections. `initdb` and `postgres` refuse to run as root, so under root they
/// run as `nobody` (util-linux `setpriv`), in a directory given to that user.
///
/// The server is this process's child: ``stop()`` (or the test's end, through `deinit`) ends
/// it at once, as a crash would, and removes the directory.
///
/// It runs with `fsync=off`: tests end processes, never the machine, and a commit written to
/// the kernel outlives a killed server all the same. With fsync on, a CI whose disk was busy
/// with other suites' fsyncs left a commit unanswered past the broker's 2 s bound for a silent
/// store, and the broker, rightly, gave the session up.
public final class PostgresServer: Sendable {
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    /// The loopback port it listens on.
    public let port: Int
    /// The cluster's directory (data, socket, log).
    public let directory: URL
    /// The running server; another after ``restart()``.
    private let server: Locked<SkyProcess>
    private let launch: @Sendable () async throws -> SkyProcess

    /// A libpq URI of database `database` as the cluster's superuser `sky`.
    public func uri(database: String = "postgres") -> String {
        "postgresql://sky@127.0.0.1:\(port)/\(database)"
    }

    private init(
        port: Int, directory: URL, server: SkyProcess, launch: @escaping @Sendable () async throws -> SkyProcess
    ) {
        self.port = port
        self.directory = directory
        self.server = Locked(server)
        self.launch = launch
    }

    /// The newest PostgreSQL's programs (`SKY_POSTGRES_BIN` overrides).
    static func programs() throws -> URL {
        if let path = ProcessInfo.processInfo.environment["SKY_POSTGRES_BIN"] {
            return URL(fileURLWithPath: path)
        }
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap(Int.init).sorted()
        guard let newest = versions.last,
            FileManager.default.isExecutableFile(atPath: "\(root)/\(newest)/bin/postgres")
        else {
            throw Unavailable(
                description:
                    "no PostgreSQL server in \(root): install Debian's postgresql package (ops/sky deps does), or set SKY_POSTGRES_BIN"
            )
        }
        return URL(fileURLWithPath: "\(root)/\(newest)/bin")
    }

    /// A PostgreSQL program, as `nobody` when this process is root (or, `asThisUser`, another
    /// program by its path, as this process's user).
    static func command(_ program: String, _ arguments: [String], name: String, asThisUser: Bool = false) throws
        -> SkyProcess
    {
        if asThisUser { return try SkyProcess(program: URL(fileURLWithPath: program), arguments, name: name) }
        let path = try programs().appendingPathComponent(program)
        guard getuid() == 0 else { return try SkyProcess(program: path, arguments, name: name) }
        return try SkyProcess(
            program: URL(fileURLWithPath: "/usr/bin/setpriv"),
            ["--reuid=65534", "--regid=65534", "--clear-groups", "--", path.path] + arguments, name: name)
    }

    /// Runs a PostgreSQL program to its end; throws with its output if it fails.
    @discardableResult
    static func run(_ program: String, _ arguments: [String], asThisUser: Bool = false) async throws -> [String] {
        let process = try command(program, arguments, name: program, asThisUser: asThisUser)
        let status = try await process.waitForExit(timeout: .seconds(60))
        guard status == 0 else {
            throw Unavailable(description: "\(program) exited \(status): \(process.errorText) \(process.outputLines)")
        }
        return process.outputLines
    }

    /// A new directory for a cluster, given to `nobody` when this process is root.
    static func makeDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sky-pg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        if getuid() == 0 { chown(directory.path, 65534, 65534) }
        return directory
    }

    /// Makes a cluster and starts its server; returns once it accepts connections.
    public static func start(name: String = "postgres") async throws -> PostgresServer {
        let directory = try makeDirectory()
        do {
            try await PostgresClusterTemplate.shared.copy(to: directory.appendingPathComponent("data"))
            return try await launch(in: directory, name: name)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    /// A streaming replica of this server (`pg_basebackup -R`), started and replicating; it
    /// becomes synchronous once this server's `synchronous_standby_names` names it (`*`).
    public func startStandby(name: String = "standby") async throws -> PostgresServer {
        let directory = try Self.makeDirectory()
        do {
            try await Self.run(
                "pg_basebackup",
                [
                    "-D", directory.appendingPathComponent("data").path, "-h", "127.0.0.1", "-p", "\(port)", "-U",
                    "sky", "-R", "-X", "stream", "--no-sync",
                ])
            return try await Self.launch(in: directory, name: name)
        } catch {
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    /// Starts `postgres` on the cluster in `directory`, on a free port.
    private static func launch(in directory: URL, name: String) async throws -> PostgresServer {
        let data = directory.appendingPathComponent("data").path
        let port = try freeLoopbackPort()
        let launch: @Sendable () async throws -> SkyProcess = {
            let server = try command(
                "postgres",
                [
                    "-D", data, "-p", "\(port)", "-k", directory.path, "-c", "listen_addresses=127.0.0.1",
                    "-c", "max_connections=20", "-c", "shared_buffers=16MB", "-c", "cluster_name=\(name)",
                    "-c", "fsync=off",
                ], name: name)
            do {
                try await server.waitForLine(onStandardError: true, timeout: .seconds(60)) {
                    $0.contains("ready to accept")  // read-write, or read-only on a standby
                }
            } catch {
                server.killNow()
                throw error
            }
            return server
        }
        return PostgresServer(port: port, directory: directory, server: try await launch(), launch: launch)
    }

    /// Runs SQL on this server as its superuser (psql), in `database`.
    public func execute(_ sql: String, database: String = "postgres") async throws {
        try await Self.run("psql", ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", uri(database: database), "-c", sql])
    }

    /// Runs a query and returns its rows, one line each, columns separated by `|`.
    public func query(_ sql: String, database: String = "postgres") async throws -> [String] {
        try await Self.run(
            "psql", ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", uri(database: database), "-c", sql])
    }

    /// Promotes this standby to a primary (`pg_ctl promote`, waiting until it is one).
    public func promote() async throws {
        try await Self.run("pg_ctl", ["promote", "-w", "-D", directory.appendingPathComponent("data").path])
    }

    /// What the server wrote to its log (standard error) so far.
    public var log: String { server.withLock { $0.errorText } }

    public var isRunning: Bool { server.withLock { $0.isRunning } }

    /// Stops every process of the server (`SIGSTOP`), as a server that hangs: its connections
    /// stay open and the kernel still takes what is sent to it. ``resume()`` lets it go on.
    public func pause() { signalEveryProcess(SIGSTOP) }

    /// Lets a paused server go on (`SIGCONT`).
    public func resume() { signalEveryProcess(SIGCONT) }

    /// The server's first process, then each it started (their parent, read from /proc).
    private func signalEveryProcess(_ signal: Int32) {
        let postmaster = server.withLock { $0.pid }
        _ = Foundation.kill(postmaster, signal)
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { continue }
            // After the command's closing parenthesis: the state, then the parent's pid.
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == postmaster { _ = Foundation.kill(pid, signal) }
        }
    }

    /// Kills the server at once, as a crash would (its data directory stays until ``stop()``).
    /// A paused server's processes are let go on first: stopped, they would never see their
    /// parent die, and would outlive the test (a checkpointer was found two hours later).
    public func kill() async {
        let server = self.server.withLock { $0 }
        resume()
        server.killNow()
        _ = try? await server.waitForExit(timeout: .seconds(20))
    }

    /// Kills the server as a crash would and starts it again on the same data and port; returns
    /// once it accepts connections (after its crash recovery).
    public func restart() async throws {
        await kill()
        let server = try await launch()
        self.server.withLock { $0 = server }
    }

    /// Ends the server and removes its directory.
    public func stop() async {
        await kill()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit {
        resume()
        server.withLock { $0.killNow() }
        try? FileManager.default.removeItem(at: directory)
    }
}
