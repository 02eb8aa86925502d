import Foundation

/// The kernel's name of the calling thread (`/proc/thread-self/comm`): how a test learns which
/// thread runs its code, since Sky's I/O threads name themselves (`skyworker-io`, `skyclient-io`).
public func currentThreadName() -> String {
    let name = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
    return name?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "unreadable"
}
