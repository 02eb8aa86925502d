import SkyWire

/// The error a ``TimeoutTask`` throws when its time is up.
package struct TimeoutError: Error, Sendable, Equatable, CustomStringConvertible {
    package let timeout: Duration

    package var description: String { "the operation did not finish within \(timeout)" }
}

/// Runs an operation with a time limit: ``value`` returns the operation's result, or throws
/// ``TimeoutError`` once the limit passes, whichever comes first; the loser is cancelled.
///
/// ```swift
/// let report = try await TimeoutTask(timeout: .seconds(2)) { try await sky.scan(task) }.value
/// ```
///
/// The operation and a timer start when ``value`` is first awaited and race; the first to finish
/// resumes the waiters, so a call returns on time even if the operation ignores cancellation.
/// Time comes from an injected clock, so tests move it by hand instead of waiting. Cancelling
/// the task that awaits ``value``, or calling ``cancel()``, cancels the operation and throws
/// `CancellationError`.
package actor TimeoutTask<Success: Sendable> {
    package nonisolated let timeout: Duration
    private let sleep: @Sendable (Duration) async throws -> Void
    private let operation: @Sendable () async throws -> Success
    private var outcome: Result<Success, any Error>?
    private var waiters: [CheckedContinuation<Success, any Error>] = []
    private var running: [Task<Void, Never>] = []

    package init<C: Clock>(
        timeout: Duration, clock: C = ContinuousClock(), operation: @escaping @Sendable () async throws -> Success
    ) where C.Duration == Duration {
        self.timeout = timeout
        self.sleep = { try await clock.sleep(for: $0.asSleep, tolerance: nil) }
        self.operation = operation
    }

    /// The operation's result; throws its error, ``TimeoutError``, or `CancellationError`.
    package var value: Success {
        get async throws {
            if let outcome { return try outcome.get() }
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    if let outcome {
                        continuation.resume(with: outcome)
                    } else if Task.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else {
                        waiters.append(continuation)
                        startIfNeeded()
                    }
                }
            } onCancel: {
                Task { await self.cancel() }
            }
        }
    }

    /// Stops waiting: cancels the operation, and waiters throw `CancellationError`.
    package func cancel() {
        finish(.failure(CancellationError()))
    }

    private func startIfNeeded() {
        guard running.isEmpty else { return }
        let operation = operation
        let sleep = sleep
        let timeout = timeout
        running = [
            Task {
                let result: Result<Success, any Error>
                do { result = .success(try await operation()) } catch { result = .failure(error) }
                self.finish(result)
            },
            Task {
                // A cancelled sleep means the operation finished first; only a full one times out.
                guard (try? await sleep(timeout)) != nil else { return }
                self.finish(.failure(TimeoutError(timeout: timeout)))
            },
        ]
    }

    private func finish(_ result: Result<Success, any Error>) {
        guard outcome == nil else { return }
        outcome = result
        for task in running { task.cancel() }
        let waiting = waiters
        waiters.removeAll()
        for waiter in waiting { waiter.resume(with: result) }
    }
}
