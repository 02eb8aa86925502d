import Foundation
import Sky
import SkyJSON
import SkyProtocol

/// What a skyscan run achieved; printed as a table or as one JSON object.
struct ScanSummary: Codable {
    var sectors: Int
    var completed: Int
    var failed: Int
    /// Extra attempts made (retries after timeouts and an unreachable broker).
    var retried: Int
    /// Results that differed from the local computation (only with --verify).
    var mismatches: Int
    var verified: Bool
    var blobs: Int
    var elapsedSeconds: Double
    var tasksPerSecond: Double
    var p50Milliseconds: Double
    var p99Milliseconds: Double
    /// Failure descriptions and how often each occurred.
    var errors: [String: Int]

    var succeeded: Bool { completed == sectors && failed == 0 && mismatches == 0 }

    func json() -> String {
        CanonicalJSON.line(self)
    }

    func table() -> String {
        var lines = [
            "sectors      \(sectors)",
            "completed    \(completed)",
            "failed       \(failed)",
            "retried      \(retried)",
        ]
        if verified { lines.append("mismatches   \(mismatches) (every result checked against a local scan)") }
        lines += [
            "blobs found  \(blobs)",
            String(format: "elapsed      %.2f s", elapsedSeconds),
            String(format: "throughput   %.1f tasks/s", tasksPerSecond),
            String(format: "latency p50  %.2f ms", p50Milliseconds),
            String(format: "latency p99  %.2f ms", p99Milliseconds),
        ]
        for (error, count) in errors.sorted(by: { $0.value > $1.value }).prefix(5) {
            lines.append("error ×\(count): \(error)")
        }
        lines.append(succeeded ? "result       OK" : "result       FAILED")
        return lines.joined(separator: "\n")
    }
}
