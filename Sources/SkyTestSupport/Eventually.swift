/// A condition that did not come true in time.
public struct NeverTrue: Error, CustomStringConvertible {
    public let description: String
}

/// Waits until `condition` holds, failing after `timeout` instead of hanging. For state that has
/// no event to await (an actor's counters): it yields first, then checks every millisecond.
public func eventually(
    _ what: String, timeout: Duration = .seconds(20), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    var checks = 0
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else {
            throw NeverTrue(description: "not true within \(timeout): \(what)")
        }
        checks += 1
        if checks < 100 { await Task.yield() } else { try await Task.sleep(for: .milliseconds(1)) }
    }
}
