import Sky

extension SkyClient {
    /// Runs every task as its own concurrent `scan` call (all in flight at once) and returns the
    /// results in the order they completed; the first failure is thrown.
    nonisolated func scanConcurrently<T: SkyTask>(_ tasks: [T], options: ScanOptions? = nil) async throws -> [T.Result]
    {
        try await withThrowingTaskGroup(of: T.Result.self) { group in
            for task in tasks { group.addTask { try await self.scan(task, options: options) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }
}
