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
    private var lastDraw = ContinuousClock.now - .seconds(1)
    private var redrawPending = false
    private var lastNotice = ""

    init(style: Style, broker: String) {
        self.style = style
        self.broker = broker
    }

    func show(_ change: ClusterEvent) {
        view.apply(change)
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
                        + ", queued \(snapshot.totalQueued), in flight \(snapshot.inFlight)")
            case .event(let event):
                ProcessSetup.line(EventFormatter.line(event))
            }
        case .table:
            scheduleRedraw()
        }
    }

    /// Redraws at most five times a second, and always after the last change.
    private func scheduleRedraw() {
        guard !redrawPending else { return }
        let wait = Duration.milliseconds(200) - (ContinuousClock.now - lastDraw)
        guard wait > .zero else {
            redraw()
            return
        }
        redrawPending = true
        Task {
            try? await Task.sleep(for: wait)
            self.redrawNow()
        }
    }

    private func redrawNow() {
        redrawPending = false
        redraw()
    }

    /// No snapshot yet after a while: the broker is probably down.
    func brokerSilent() {
        problem("no answer from the broker at \(broker) yet; still trying")
    }

    func problem(_ message: String) {
        guard message != lastNotice else { return }
        lastNotice = message
        FileHandle.standardError.write(Data("skywatch: \(message)\n".utf8))
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
        lastDraw = ContinuousClock.now
        var text = "\u{1B}[H\u{1B}[2J"
        text += WorkerTable.render(view, broker: broker)
        FileHandle.standardOutput.write(Data(text.utf8))
    }
}
