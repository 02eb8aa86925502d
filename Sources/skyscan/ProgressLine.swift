import Foundation
import Sky
import SkyCLISupport

/// A one-line progress display on standard error, redrawn in place, shown only on a terminal.
struct ProgressLine {
    private let total: Int
    private let enabled: Bool
    private var lastDraw = ContinuousClock.now

    init(total: Int, enabled: Bool) {
        self.total = total
        self.enabled = enabled && isatty(STDERR_FILENO) == 1
    }

    mutating func update(_ progress: BatchProgress) {
        guard enabled else { return }
        let now = ContinuousClock.now
        let done = progress.finished
        guard now - lastDraw >= .milliseconds(100) || done == total else { return }
        lastDraw = now
        let width = 30
        let filled = total == 0 ? width : width * done / total
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let text = String(
            format: "\r[%@] %d/%d  %.0f tasks/s  %d retried  %d failed ", bar, done, total, progress.tasksPerSecond,
            progress.retried, progress.failed)
        ProcessSetup.standardError(text)
    }

    func finish() {
        guard enabled else { return }
        ProcessSetup.standardError("\n")
    }
}
