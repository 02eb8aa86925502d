import Foundation
import Sky
import SkyCLISupport

/// Keeps the cluster view and shows it in one of three styles.
actor WatchDisplay {
    enum Style {
        /// A table redrawn in place (a terminal).
        case table
        /// One line per event (piped).
        case lines
        /// JSON lines.
        case json
    }

    let style: Style
    let broker: String
    private(set) var view = ClusterView()
    private var redraws = Throttle(interval: .milliseconds(200))
    private var lastNotice = ""
    private var silence = BrokerSilence()
    /// Set while the broker has been silent for three stats periods: since when.
    var unreachableSince: Date? { silence.unreachableSince }
    /// The last few departures, newest last, for the table (workers otherwise just vanish).
    private(set) var departures: [String] = []

    init(style: Style, broker: String) {
        self.style = style
        self.broker = broker
    }

    func show(_ change: ClusterEvent) {
        view.apply(change)
        heard(change)
        switch style {
        case .json:
            switch change {
            case .snapshot(let snapshot): ProcessSetup.line(JSONLines.object("snapshot", snapshot))
            case .event(let event): ProcessSetup.line(event.jsonLine())
            }
        case .lines:
            switch change {
            case .snapshot(let snapshot):
                let names = snapshot.workers.map(\.name).sorted().joined(separator: ", ")
                ProcessSetup.line(
                    "snapshot #\(snapshot.seq): \(snapshot.workers.count) worker(s)"
                        + (names.isEmpty ? "" : " (\(names))")
                        + ", queued \(snapshot.totalQueued), in flight \(snapshot.inFlight)"
                        + (snapshot.epoch.map { ", active broker epoch \($0)" } ?? ""))
            case .event(let event):
                ProcessSetup.line(EventFormatter.line(event))
            }
        case .table:
            scheduleRedraw()
        }
    }

    /// Redraws at most five times a second, and always after the last change.
    private func scheduleRedraw() {
        guard let wait = redraws.changed() else { return }
        guard wait > .zero else {
            redraw()
            return
        }
        Task {
            try? await Task.sleep(for: wait)
            self.redrawNow()
        }
    }

    private func redrawNow() {
        redraws.scheduledFired()
        redraw()
    }

    private func heard(_ change: ClusterEvent) {
        var isStats = false
        if case .event(let event) = change, event.event == .brokerStats { isStats = true }
        if silence.heard(stats: isStats) {
            problem("the broker at \(broker) is reachable again")
        }
        guard case .event(let event) = change else { return }
        switch event.event {
        case .workerDisconnected:
            guard let line = Self.departure(event) else { return }
            departures.append(line)
            if departures.count > 5 { departures.removeFirst() }
        default:
            break
        }
    }

    /// Called every second: a broker silent for three of its stats periods (at least 3 s) is
    /// reported unreachable, instead of a table that only looks stale.
    func checkBroker() {
        guard let silent = silence.check(), let unreachableSince else { return }
        let since = Self.time(unreachableSince)
        switch style {
        case .table: redraw()
        case .lines, .json:
            let seconds = Double(silent.components.seconds) + Double(silent.components.attoseconds) / 1e18
            problem(
                "broker unreachable since \(since): no event from \(broker) for \(String(format: "%.1f", seconds)) s")
        }
    }

    static func time(_ date: Date) -> String { BrokerSilence.time(date) }

    /// A departure's line: who left, why, and what went elsewhere.
    static func departure(_ event: SkyEvent) -> String? {
        guard let worker = event.worker else { return nil }
        let held = event.tasksHeld ?? 0
        // Graceful with tasks still held: its drain ran out of time, which is not "drained".
        let reason =
            event.reason == .graceful && held > 0 ? "drain grace ran out" : event.reason?.rawValue ?? "unknown reason"
        return "\(event.time) \(worker.name) left: \(reason)" + (held > 0 ? ", \(held) task(s) sent elsewhere" : "")
    }

    /// No snapshot yet after a while: the broker is probably down, or one of the two endpoints
    /// is not its own (both are named: the snapshot waits for the subscription's first event).
    /// - Parameter cause: what the transport saw of the clients endpoint, if anything.
    func brokerSilent(events: String?, cause: String? = nil) {
        problem(
            "no answer from the broker at \(broker) (events \(events ?? "unknown")) yet"
                + (cause.map { ": \($0)" } ?? "") + "; still trying"
                + " (--broker names its clients endpoint, where the snapshot comes from; --events its events endpoint)")
    }

    func problem(_ message: String) {
        guard message != lastNotice else { return }
        lastNotice = message
        ProcessSetup.standardError("skywatch: \(message)\n")
    }

    func timedOut(after seconds: Double) {
        problem("timed out after \(seconds) s with \(view.workers.count) worker(s) connected")
    }

    /// The last word: the table once more, and in JSON mode the worker table as one line.
    func finish() {
        switch style {
        case .json: ProcessSetup.line(JSONLines.object("table", view.sortedWorkers))
        case .table: redraw()
        case .lines: break
        }
    }

    private func redraw() {
        redraws.acted()
        var text = "\u{1B}[H\u{1B}[2J"
        let table = WorkerTable.render(
            view, broker: broker, unreachableSince: unreachableSince.map(Self.time), departures: departures)
        text += WorkerTable.fitted(table, columns: Self.terminalColumns())
        ProcessSetup.standardOutput(text)
    }

    /// The terminal's width now (it may have been resized since the last redraw); `nil` when
    /// standard output is no terminal, or says no width.
    private static func terminalColumns() -> Int? {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return nil }
        return Int(size.ws_col)
    }
}
