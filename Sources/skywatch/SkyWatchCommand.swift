import ArgumentParser
import Foundation
import Logging
import Sky
import SkyCLISupport
import UnixSignals

@main
struct SkyWatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skywatch",
        abstract: "Shows a Sky cluster live: its workers, their load, and what happens to them.",
        discussion: """
            Takes the broker's snapshot, then applies its events in order (a gap in their numbers,
            or a broker restart, takes a new snapshot). On a terminal it shows a table that
            redraws in place; piped, it prints one line per event; --json prints JSON lines
            (the snapshot as {"snapshot": ...}, then the events) and, when stopped with SIGTERM
            or SIGINT, the final worker table as {"table": [...]}. With --wait-workers N it exits
            0 as soon as N workers are connected, or 1 after --timeout seconds. While the
            broker is unreachable it says so and keeps trying.
            """)

    @Option(
        help: ArgumentHelp(
            "The broker's clients endpoint (for snapshots); for an active broker and its standbys, each one's, separated by commas.",
            valueName: "endpoint[,endpoint…]"))
    var broker = "tcp://127.0.0.1:5555"

    @Option(
        help:
            "The broker's events endpoint, or several separated by commas (default: each clients endpoint's port + 2); the snapshot still comes from --broker."
    )
    var events: String?

    @Flag(help: "Print JSON lines instead of a table or text.")
    var json = false

    @Option(parsing: .unconditional, help: "Exit 0 once this many workers are connected.")
    var waitWorkers: Int?

    @Option(parsing: .unconditional, help: "With --wait-workers: give up after this many seconds (exit 1).")
    var timeout: Double = 30

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        try FlagCheck.endpointList(broker, "--broker")
        if let events { try FlagCheck.endpointList(events, "--events") }
        if let waitWorkers { try FlagCheck.integer(waitWorkers, "--wait-workers", in: 0...1_000_000) }
        try FlagCheck.seconds(timeout, "--timeout", in: 0.001...86_400)
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skywatch", options: common)
        var configuration = SkyClient.Configuration()
        configuration.events = events
        configuration.logger = logger
        // One key pair for both sockets: on the client list (snapshots) and the watcher list (events).
        configuration.credentials = curve.credentials(program: "skywatch")
        let client: SkyClient
        do {
            client = try await SkyClient(brokers: FlagCheck.endpoints(broker), configuration: configuration)
        } catch {
            ProcessSetup.fail("skywatch", "\(error)")
        }
        let style: WatchDisplay.Style =
            json ? .json : (isatty(STDOUT_FILENO) == 1 && waitWorkers == nil ? .table : .lines)
        let display = WatchDisplay(style: style, broker: broker)
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let outcome = await withTaskGroup(of: Int32.self) { group in
            let target = waitWorkers
            group.addTask { await Self.watch(client, display, until: target) }
            group.addTask {
                for await _ in signals { return 0 }
                return 0
            }
            group.addTask {
                while (try? await Task.sleep(for: .seconds(1))) != nil { await display.checkBroker() }
                return 0
            }
            group.addTask {
                // Pointed at another port of the broker's (or refused): said, and exit 1.
                if let mistake = await client.endpointMistake() {
                    await display.problem("\(mistake)")
                    return 1
                }
                while (try? await Task.sleep(for: .seconds(3600))) != nil {}
                return 0
            }
            if waitWorkers != nil {
                let limit = timeout
                group.addTask {
                    try? await Task.sleep(for: .milliseconds(Int64(limit * 1000)))
                    guard !Task.isCancelled else { return 0 }
                    await display.timedOut(after: limit)
                    return 1
                }
            }
            let first = await group.next() ?? 0
            group.cancelAll()
            return first
        }
        await display.finish()
        await client.close()
        if outcome != 0 { throw ExitCode(outcome) }
    }

    /// Follows the cluster until --wait-workers is met (returns 0) or the task is cancelled.
    private static func watch(_ client: SkyClient, _ display: WatchDisplay, until waitWorkers: Int?) async -> Int32 {
        // Said after 2 s, and again when what the transport saw changes (another kind of
        // server on the port shows only once its handshake has timed out).
        let patience = Task {
            while true {
                try await Task.sleep(for: .seconds(2))
                await display.brokerSilent(events: client.eventsEndpoint, cause: client.unreachableCause)
            }
        }
        defer { patience.cancel() }
        while !Task.isCancelled {
            do {
                for try await change in client.events() {
                    patience.cancel()
                    await display.show(change)
                    if let waitWorkers, await display.view.workers.count >= waitWorkers { return 0 }
                }
            } catch let error as SkyError where [.unauthorized, .wrongEndpoint].contains(error.code) {
                // A mistake in the keys or endpoints: retrying cannot fix it.
                await display.problem("\(error)")
                return 1
            } catch is CancellationError {
                // Stopped (a signal, --wait-workers met elsewhere): not a problem to report.
                return 0
            } catch {
                guard !Task.isCancelled else { return 0 }
                await display.problem("\(error)")
                try? await Task.sleep(for: .seconds(1))
            }
        }
        return 0
    }
}
