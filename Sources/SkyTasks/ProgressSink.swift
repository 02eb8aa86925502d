import SkyProtocol
import Synchronization

/// Where a running handler's progress and log lines wait for the worker's I/O thread, which
/// sends them to the broker in a PROGRESS at most once a tick (``TaskContext/progress(_:_:)``).
///
/// Made only for a handler that takes a ``TaskContext``, when it first reports (by the worker's
/// ``ProgressSinks``). What a handler reports after it returned reaches the worker's machine,
/// which drops it: its task is no longer running. What waits is
/// bounded as the broker's record is (``JobProgress``): the last message, and the newest lines
/// within ``JobProgress/maxLines`` and ``JobProgress/maxLinesBytes``; older lines give way.
package final class ProgressSink: Sendable {
    /// The delivery whose handler reports.
    package let tag: DeliveryTag
    package let requestID: RequestID
    private let state = Mutex(State())
    /// Called (once until the next ``take()``) when something waits: hands the sink to the
    /// I/O thread's list.
    private let waiting: @Sendable (ProgressSink) -> Void

    private struct State {
        var pending = ProgressReport()
        var linesBytes = 0
        var queued = false
    }

    package init(tag: DeliveryTag, requestID: RequestID, waiting: @escaping @Sendable (ProgressSink) -> Void) {
        self.tag = tag
        self.requestID = requestID
        self.waiting = waiting
    }

    func report(fraction: Double?, message: String?, line: String?) {
        let announce = state.withLock { state -> Bool in
            if let fraction { state.pending.fraction = fraction }
            if let message { state.pending.message = message }
            if let line {
                state.pending.droppedLines += JobProgress.append(
                    line, to: &state.pending.lines, bytes: &state.linesBytes)
            }
            defer { state.queued = true }
            return !state.queued
        }
        if announce { waiting(self) }
    }

    /// What waits, taken (nil if nothing does).
    package func take() -> ProgressReport? {
        state.withLock { state in
            state.queued = false
            return Self.taken(&state)
        }
    }

    private static func taken(_ state: inout State) -> ProgressReport? {
        guard !state.pending.isEmpty else { return nil }
        defer {
            state.pending = ProgressReport()
            state.linesBytes = 0
        }
        return state.pending
    }
}

/// The worker's side of ``ProgressSink``: makes the sink of a delivery on its handler's first
/// report.
package protocol ProgressSinks: Sendable {
    func sink(tag: DeliveryTag, requestID: RequestID) -> ProgressSink
}
