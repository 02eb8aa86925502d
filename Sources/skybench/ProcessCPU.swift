import Foundation

/// Reads how much CPU time processes used, from `/proc/PID/stat` (user + system time of all
/// their threads, living and gone; the kernel counts it in clock ticks, 10 ms here, so measured
/// phases last long enough for that to be a small error).
struct ProcessCPU: Sendable {
    /// The processes to read, by role.
    let roles: [(role: String, pid: Int32)]

    private static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// CPU seconds used so far, by role (roles whose process is gone are left out).
    func read() -> [String: Double] { byRole(Self.seconds(of:)) }

    /// CPU seconds used between `start` and now, by role.
    func since(_ start: [String: Double]) -> [String: Double] { Self.difference(read(), start) }

    /// Context switches so far, by role: voluntary and involuntary, of every living thread
    /// (`/proc/PID/task/*/status`). Each is a wake-up or a preemption: the count that timings
    /// on a shared machine hide.
    func readSwitches() -> [String: Int] { byRole(Self.switches(of:)) }

    /// Context switches between `start` and now, by role.
    func switchesSince(_ start: [String: Int]) -> [String: Int] { Self.difference(readSwitches(), start) }

    private func byRole<Value>(_ value: (Int32) -> Value?) -> [String: Value] {
        var values: [String: Value] = [:]
        for (role, pid) in roles { values[role] = value(pid) }
        return values
    }

    private static func difference<Value: Numeric>(_ now: [String: Value], _ then: [String: Value]) -> [String: Value] {
        var used: [String: Value] = [:]
        for (role, value) in now {
            if let start = then[role] { used[role] = value - start }
        }
        return used
    }

    /// Context switches of every living thread of `pid`, or `nil` if they cannot be read.
    static func switches(of pid: Int32) -> Int? {
        let directory = "/proc/\(pid)/task"
        guard let threads = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return nil }
        var total = 0
        for thread in threads {
            guard let text = try? String(contentsOfFile: "\(directory)/\(thread)/status", encoding: .utf8) else {
                continue
            }
            for line in text.split(separator: "\n")
            where line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                total += Int(line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
            }
        }
        return total
    }

    /// utime + stime of `pid` in seconds, or `nil` if it cannot be read.
    static func seconds(of pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // After the command name in parentheses: state is field 3, utime and stime are 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / ticksPerSecond
    }
}
