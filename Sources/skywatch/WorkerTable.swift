import Foundation
import Sky
import SkyJSON
import SkyProtocol

/// The live table: a header with the broker's totals, then one row per worker.
enum WorkerTable {
    /// - Parameters:
    ///   - unreachableSince: when the broker was last heard, if it has gone silent: a banner
    ///     says the figures below are as they were then.
    ///   - departures: recent departures, one line each, shown under the workers.
    static func render(
        _ view: ClusterView, broker: String, unreachableSince: String? = nil, departures: [String] = []
    ) -> String {
        var lines: [String] = []
        if let unreachableSince {
            lines.append(
                "!! BROKER UNREACHABLE since \(unreachableSince): nothing heard since; the figures below are from then")
        }
        lines += [
            "Sky cluster at \(broker)   (event #\(view.seq))",
            String(
                format: "workers %d   queued %d   in flight %d   completed %llu   failed %llu   %.1f tasks/s",
                view.workers.count, view.queued, view.inFlight, view.completed, view.failed, view.tasksPerSecond),
        ]
        if let jobs = view.jobs {
            lines.append(
                "jobs: \(jobs.held) held (\(jobs.queued) waiting)   submitted \(jobs.submitted)   succeeded \(jobs.succeeded)   failed \(jobs.failed)   cancelled \(jobs.cancelled)   retried \(jobs.retried)   journal \(jobs.journalBytes / 1024) KiB\(jobs.journalFailing == true ? " FAILING (writes refused: see the broker's log)" : "")"
            )
        }
        if let dropped = view.counters?.drops, !dropped.isEmpty {
            lines.append(
                "dropped: " + dropped.map { "\($0.name) \($0.count)" }.joined(separator: "   ")
                    + "   (docs/protocol.md lists each; the broker's log says why)")
        }
        lines += [
            "",
            pad(["WORKER", "HOST", "CAPACITY", "RUNNING", "COMPLETED", "FAILED", "LAST HEARD", "SERVICES"]),
        ]
        for worker in view.sortedWorkers {
            let heard = worker.lastHeardMilliseconds.map { String(format: "%.1f s ago", Double($0) / 1000) } ?? "-"
            let name = view.draining.contains(worker.id) ? worker.name + " (draining)" : worker.name
            lines.append(
                pad([
                    name, worker.host ?? "-", "\(worker.capacity)", "\(worker.inFlight ?? 0)",
                    "\(worker.completed ?? 0)", "\(worker.failed ?? 0)", heard, worker.services.joined(separator: ","),
                ]))
        }
        if view.workers.isEmpty { lines.append("(no workers connected)") }
        if !view.services.isEmpty {
            lines += ["", pad(["SERVICE", "QUEUED", "RATE/S", "FAILED", "P50", "P99"], widths: serviceWidths)]
            for (name, service) in view.services.sorted(by: { $0.key < $1.key }) {
                func milliseconds(_ value: Double?) -> String { value.map { String(format: "%.1f ms", $0) } ?? "-" }
                lines.append(
                    pad(
                        [
                            service.paused == true ? "\(name) (paused)" : name, "\(service.queued)",
                            String(format: "%.1f", service.completedPerSecond),
                            "\(service.failed)", milliseconds(service.p50Milliseconds),
                            milliseconds(service.p99Milliseconds),
                        ], widths: serviceWidths))
            }
        }
        if !departures.isEmpty {
            lines += ["", "RECENT DEPARTURES"] + departures
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` with each line cut to `columns` (its last kept character an ellipsis), so that a
    /// narrow terminal shows the table's start of each line instead of wrapping it into the
    /// next; as it is without a width.
    static func fitted(_ text: String, columns: Int?) -> String {
        guard let columns, columns > 1 else { return text }
        return text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.count <= columns ? String(line) : String(line.prefix(columns - 1)) + "…"
        }.joined(separator: "\n")
    }

    private static let widths = [24, 16, 9, 8, 10, 8, 12, 0]
    private static let serviceWidths = [24, 9, 10, 8, 11, 0]

    private static func pad(_ cells: [String], widths: [Int] = widths) -> String {
        zip(cells, widths).map { cell, width in
            width == 0 || cell.count >= width ? cell + " " : cell.padding(toLength: width, withPad: " ", startingAt: 0)
        }.joined()
    }
}

/// One-key JSON objects for skywatch's JSON lines.
enum JSONLines {
    static func object(_ key: String, _ value: some Encodable) -> String {
        "{\"\(key)\":\(CanonicalJSON.line(value, fallback: "null"))}"
    }
}
