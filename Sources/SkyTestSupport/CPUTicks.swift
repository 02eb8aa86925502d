import Foundation

/// User plus system CPU time, in clock ticks, from a `/proc` `stat` file: `/proc/PID/stat` for a
/// process, `/proc/self/task/TID/stat` for one of this process's threads. `nil` if it cannot be
/// read.
public func cpuTicks(statFile path: String) -> Int? {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    // After the command name in parentheses: state is field 3, utime and stime are 14 and 15.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
    return user + system
}
