import Foundation

/// Reads how much CPU time processes used, from `/proc/PID/stat` (user + system time of all
/// their threads, living and gone; the kernel counts it in clock ticks, 10 ms here, so measured
/// phases last long enough for that to be a small error).
struct ProcessCPU: Sendable {
    /// The processes to read, by role.
    let roles: [(role: String, pid: Int32)]

    private static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// CPU seconds used so far, by role (roles whose process is gone are left out).
    func read() -> [String: Double] {
        var seconds: [String: Double] = [:]
        for (role, pid) in roles {
            seconds[role] = Self.seconds(of: pid)
        }
        return seconds
    }

    /// CPU seconds used between `start` and now, by role.
    func since(_ start: [String: Double]) -> [String: Double] {
        var used: [String: Double] = [:]
        for (role, now) in read() {
            if let then = start[role] { used[role] = now - then }
        }
        return used
    }

    /// Context switches so far, by role: voluntary and involuntary, of every living thread
    /// (`/proc/PID/task/*/status`). Each is a wake-up or a preemption: the count that timings
    /// on a shared machine hide.
    func readSwitches() -> [String: Int] {
        var switches: [String: Int] = [:]
        for (role, pid) in roles {
            switches[role] = Self.switches(of: pid)
        }
        return switches
    }

    /// Context switches between `start` and now, by role.
    func switchesSince(_ start: [String: Int]) -> [String: Int] {
        var made: [String: Int] = [:]
        for (role, now) in readSwitches() {
            if let then = start[role] { made[role] = now - then }
        }
        return made
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
