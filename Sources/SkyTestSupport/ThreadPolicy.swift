import Foundation

/// The kernel's scheduling policy of a thread, as `/proc` shows it (3 is `SCHED_BATCH`, 0 the
/// default `SCHED_OTHER`): what tests check the I/O threads against, from outside the code that
/// set it.
public enum ThreadPolicy {
    /// The policy of thread `thread` (a kernel thread id) of process `process`; `nil` if
    /// `/proc` has no policy line for it.
    public static func of(thread: Int32, in process: Int32) throws -> Int? {
        let text = try String(contentsOfFile: "/proc/\(process)/task/\(thread)/sched", encoding: .utf8)
        let line = text.split(separator: "\n").first { $0.hasPrefix("policy") }
        return line?.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// The policy of the thread of process `process` named `name` (its `comm`); `nil` when
    /// there is no such thread.
    public static func of(threadNamed name: String, in process: Int32) throws -> Int? {
        let tasks = "/proc/\(process)/task"
        for thread in try FileManager.default.contentsOfDirectory(atPath: tasks) {
            let comm = try? String(contentsOfFile: "\(tasks)/\(thread)/comm", encoding: .utf8)
            guard comm?.trimmingCharacters(in: .whitespacesAndNewlines) == name, let id = Int32(thread) else {
                continue
            }
            return try of(thread: id, in: process)
        }
        return nil
    }
}
