/// Waits until `condition` holds, failing after `timeout` instead of hanging. For in-process
/// state that has no event to await (a client's count of calls in flight): it yields first,
/// then checks every millisecond.
func eventually(
    _ what: String, timeout: Duration = .seconds(20), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    var checks = 0
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else {
            throw SkyProcess.Timeout(description: "not true within \(timeout): \(what)")
        }
        checks += 1
        if checks < 100 { await Task.yield() } else { try await Task.sleep(for: .milliseconds(1)) }
    }
}

/// The value of `task`, or a failure after `timeout` (the task is cancelled then).
func value<T: Sendable>(of task: Task<T, any Error>, within timeout: Duration = .seconds(30), _ what: String)
    async throws -> T
{
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await task.value }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let result = try await group.next(), let value = result else {
            task.cancel()
            throw SkyProcess.Timeout(description: "no result within \(timeout): \(what)")
        }
        return value
    }
}
