import SkyTestSupport

/// The value of `task`, or a failure after `timeout` (the task is cancelled then).
func value<T: Sendable>(of task: Task<T, any Error>, within timeout: Duration = .seconds(30), _ what: String)
    async throws -> T
{
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await task.value }
        group.addTask {
            try await Task.sleep(for: timeout)  // the time limit, raced against the task
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
