import Foundation
import Sky

/// `skyctl jobs show`'s lines after the first: a job's details, one fact a line, a label and a
/// value, only the facts the job has.
enum JobDetailLines {
    static func lines(_ details: JobDetails) -> [String] {
        var facts: [(String, String)] = []
        func add(_ label: String, _ value: String?) {
            if let value { facts.append((label, value)) }
        }
        add("service", details.service)
        add("priority", details.priority.map { "\($0)" })
        add("attempts", details.attempt.map { attempts($0, allowed: details.maxAttempts) })
        add("submitted", details.submittedAt.map(time))
        add("not before", details.notBefore.map(time))
        add("started", details.startedAt.map(time))
        add(
            "ended",
            details.endedAt.map { ended in
                details.startedAt.map { "\(time(ended)) (ran \(seconds(ended - $0)))" } ?? time(ended)
            })
        add("worker", details.worker)
        if details.progress != nil || details.progressMessage != nil {
            let fraction = details.progress.map { String(format: "%.0f %%", $0 * 100) }
            let said = [fraction, details.progressMessage].compactMap { $0 }.joined(separator: ": ")
            add("progress", said + (details.progressAt.map { " (at \(time($0)))" } ?? ""))
        }
        add("timeout", details.timeoutMilliseconds.map { seconds(Int64($0)) })
        add(
            "key",
            details.concurrencyKey.map { key in details.concurrencyLimit.map { "\(key) (at most \($0) at once)" } ?? key
            })
        add("idempotency", details.idempotencyKey)
        add("error", details.errorType.map { type in details.errorMessage.map { "\(type): \($0)" } ?? type })
        add("result", details.resultBytes.map { "\($0) bytes" })
        add("retry of", details.retryOf)
        add("retried as", details.retriedAs)
        add("kept until", details.expiresAt.map(time))
        var lines = facts.map { label, value in "  " + label.padding(toLength: 12, withPad: " ", startingAt: 0) + value
        }
        if let log = details.log, !log.isEmpty {
            let dropped = details.droppedLogLines.map { "; \($0) older gave way" } ?? ""
            lines.append("  log (last \(log.count) lines\(dropped)):")
            lines += log.map { "    " + $0 }
        }
        return lines
    }

    /// Executions started, and how many the retry policy allows: work lost with a worker or a
    /// broker runs again beyond that (up to `--max-deliveries`), which "3 of 1" would not say.
    static func attempts(_ attempt: Int, allowed: Int?) -> String {
        guard let allowed else { return "\(attempt)" }
        guard attempt > allowed else { return "\(attempt) of \(allowed)" }
        return "\(attempt) (its retry policy allows \(allowed); work lost with a worker or a broker runs again)"
    }

    /// Milliseconds since 1970 as UTC, to the millisecond.
    static func time(_ milliseconds: Int64) -> String {
        guard milliseconds < 253_402_300_800_000 else { return "never" }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    private static func seconds(_ milliseconds: Int64) -> String {
        milliseconds < 1000 ? "\(milliseconds) ms" : "\(Double(milliseconds) / 1000) s"
    }
}
