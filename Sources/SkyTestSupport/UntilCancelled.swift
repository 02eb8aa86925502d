/// Suspends until the calling task is cancelled, then throws `CancellationError`: work that never
/// ends by itself (a hung handler, an endless operation), without a timer behind it, so that a
/// test waits for the cancellation it is about and for nothing else.
public func untilCancelled() async throws -> Never {
    // Nothing is ever yielded; cancelling the task ends the iteration.
    let (never, keepOpen) = AsyncStream.makeStream(of: Void.self)
    for await _ in never {}
    withExtendedLifetime(keepOpen) {}
    throw CancellationError()
}
