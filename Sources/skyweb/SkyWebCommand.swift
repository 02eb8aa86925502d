import ArgumentParser
import Foundation
import Logging
import Sky
import SkyCLISupport
import SkyProtocol
import UnixSignals

@main
struct SkyWebCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skyweb",
        abstract: "Serves a web dashboard of a Sky cluster: workers, services, failures and durable jobs, live.",
        discussion: """
            Joins the cluster as a watcher, like skywatch (the broker's snapshot, then its events),
            and serves one page at http://HOST:PORT/ that updates itself over a WebSocket. The page
            needs nothing from the internet. Jobs can be searched, cancelled and retried from it, and
            schedules paused, resumed and run now, services paused and resumed, and failed jobs
            retried or deleted by error type (not with --read-only). Without --token-file or
            --auth-file there is no login: keep --listen on loopback (the default), or give a token or
            users' passwords for access from elsewhere.
            """)

    @Option(
        help: ArgumentHelp(
            "The broker's clients endpoint (snapshots and jobs); for an active broker and its standbys, each one's, separated by commas.",
            valueName: "endpoint[,endpoint…]"))
    var broker = "tcp://127.0.0.1:5555"

    @Option(
        help:
            "The broker's events endpoint, or several separated by commas (default: each clients endpoint's port + 2).")
    var events: String?

    @Option(help: "Serve the page at http://HOST:PORT/ (PORT 0 picks a free one; the ready line names it).")
    var listen = "127.0.0.1:8470"

    @Flag(
        help:
            "Show the cluster only: no actions from the page (jobs, schedules, services, failed jobs)."
    )
    var readOnly = false

    @Option(
        help: ArgumentHelp(
            "A file whose first line is a token of at least 16 characters: the page then asks for it (and scripts send it as Authorization: Bearer TOKEN).",
            valueName: "path"))
    var tokenFile: String?

    @Option(
        help: ArgumentHelp(
            "A file of users' bcrypt-hashed passwords, a line USER:HASH each (htpasswd -B's format): the page then asks for a user and password.",
            valueName: "path"))
    var authFile: String?

    @Flag(help: "Read a password from standard input, print its bcrypt hash for --auth-file, and exit.")
    var hashPassword = false

    @Option(
        name: .customLong("allow-host"),
        help: """
            A host name the page may be opened by besides IP addresses and localhost (repeat for more). \
            Requests addressed to other names are refused, so that another site cannot reach the dashboard \
            by pointing its own name at this address (DNS rebinding).
            """)
    var allowedHosts: [String] = []

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        if hashPassword { return }
        try FlagCheck.endpointList(broker, "--broker")
        if let events { try FlagCheck.endpointList(events, "--events") }
        do {
            if let tokenFile { _ = try LoginGate.token(inFile: tokenFile) }
            if let authFile { _ = try LoginGate.passwords(inFile: authFile) }
        } catch {
            throw ValidationError("\(error)")
        }
        guard MetricsEndpoint.split(listen) != nil else {
            throw ValidationError(
                "--listen \(listen) is not HOST:PORT with an IPv4 address and a port in 0...65535 (for example 127.0.0.1:8470)"
            )
        }
    }

    func run() async throws {
        if hashPassword { Self.printHash() }
        let logger = ProcessSetup.prepare(label: "skyweb", options: common)
        var configuration = SkyClient.Configuration()
        configuration.events = events
        configuration.logger = logger
        configuration.credentials = curve.credentials(program: "skyweb")
        let client: SkyClient
        do {
            client = try await SkyClient(brokers: FlagCheck.endpoints(broker), configuration: configuration)
        } catch {
            ProcessSetup.fail("skyweb", "\(error)")
        }
        let dashboard = Dashboard(model: DashboardModel(broker: broker, actions: !readOnly))
        guard let (host, port) = MetricsEndpoint.split(listen) else { return }
        let bound: UInt16
        do {
            bound = try await DashboardServer(
                dashboard: dashboard, client: client, readOnly: readOnly, hosts: HostCheck(allowing: allowedHosts),
                gate: tokenFile == nil && authFile == nil
                    ? nil
                    : LoginGate(
                        token: try tokenFile.map(LoginGate.token(inFile:)),
                        passwords: try authFile.map(LoginGate.passwords(inFile:)) ?? [:])
            )
            .start(host: host, port: port).port
        } catch {
            ProcessSetup.fail(
                "skyweb", "cannot serve the dashboard at \(listen): \(ListenFailure.text(error)); pick another --listen"
            )
        }
        ProcessSetup.readyLine("skyweb ready url=http://\(host):\(bound)/ broker=\(broker)")
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await Self.follow(client, dashboard, logger: logger) }
            group.addTask {
                for await _ in signals { return }
            }
            group.addTask {
                // Pointed at another port of the broker's (or refused): said, and exit 1.
                if let mistake = await client.endpointMistake() { ProcessSetup.fail("skyweb", "\(mistake)") }
                while (try? await Task.sleep(for: .seconds(3600))) != nil {}
            }
            group.addTask {
                while (try? await Task.sleep(for: .seconds(1))) != nil { await dashboard.checkBroker() }
            }
            _ = await group.next()
            group.cancelAll()
        }
        await client.close()
    }

    /// Applies the cluster's snapshot and events to the dashboard until cancelled; a broken
    /// stream (broker restarted, unreachable) is taken up again after a second.
    private static func follow(_ client: SkyClient, _ dashboard: Dashboard, logger: Logger) async {
        let patience = Task {
            try await Task.sleep(for: .seconds(3))
            logger.warning(
                "no answer from the broker yet; still trying (is --broker its clients endpoint?)",
                metadata: ["broker": "\(client.broker)"])
        }
        defer { patience.cancel() }
        while !Task.isCancelled {
            do {
                for try await change in client.events() {
                    patience.cancel()
                    await dashboard.apply(change)
                }
            } catch let error as SkyError where [.unauthorized, .wrongEndpoint].contains(error.code) {
                // A mistake in keys or endpoints: retrying cannot fix it.
                ProcessSetup.fail("skyweb", "\(error)")
            } catch {
                logger.warning("lost the broker's events; trying again", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// `--hash-password`: the hash of the first line of standard input, for `--auth-file`.
    private static func printHash() -> Never {
        guard let password = readLine(strippingNewline: true), !password.isEmpty else {
            ProcessSetup.fail("skyweb", "--hash-password reads a password from standard input; it read none")
        }
        guard let hash = Bcrypt.hash(password) else {
            ProcessSetup.fail("skyweb", "this system's libcrypt makes no bcrypt hashes; make one with htpasswd -B")
        }
        print(hash)
        Foundation.exit(0)
    }
}
