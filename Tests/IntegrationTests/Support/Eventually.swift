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
