/// Where a worker runs its handlers.
///
/// A task's message lands on the worker's I/O thread. On Swift's cooperative pool (the
/// default) the task wakes a pool thread, and its reply wakes the I/O thread again: two thread
/// wake-ups a task, which for a handler of a few microseconds are most of its cost and of its
/// latency. On the I/O thread the handler runs where its message landed and its reply leaves
/// in the same wake-up.
public enum HandlerExecutor: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// Swift's cooperative pool: handlers run beside each other on every core, and the I/O
    /// thread keeps heartbeats flowing whatever they do. Right for any handler.
    case pool
    /// The worker's I/O thread: for handlers that are short or that mostly await (a lookup, a
    /// call to another service, a timer). Handlers then share that one thread with each other
    /// and with the connection: a handler that computes for a second holds up every other task
    /// and the heartbeats for that second (the broker presumes the worker lost after
    /// `liveness` missed intervals), so CPU-bound handlers belong on the pool.
    case ioThread = "io-thread"

    public var description: String { rawValue }
}
