import SkyWire

/// Inputs for a loop's thread, in order, kept beside the loop's mailbox rather than in it: a
/// shell keeps one under a lock for what other threads post to its inline handler (a client's
/// calls, a worker's finished tasks).
///
/// The loop carries inputs as `any Sendable`: a client call's input (its service, body and
/// options) was boxed into one and cast back on the thread, on every call.
/// Here each input is one append. The first input of a batch posts one marker to the loop (so
/// at most one wake-up for every input posted before the thread takes them), and the thread
/// takes the whole queue when it reads the marker, trading it for an empty buffer of its own.
public struct InputQueue<Input: Sendable>: Sendable {
    @usableFromInline var items: [Input] = []
    /// Nothing will take the queue again (the loop stopped): inputs are refused.
    public private(set) var stopped = false

    public enum Appended: Equatable, Sendable {
        /// The queue was empty: post the marker.
        case first
        /// A marker is already on its way.
        case queued
        /// The queue is stopped; the input was not kept.
        case refused
    }

    public init() {}

    /// Consumed: a client call's input (its service, body and options) was copied into the
    /// queue, each of its references retained, and the caller's copy destroyed, on every call.
    @inlinable
    public mutating func append(_ input: consuming Input) -> Appended {
        guard !stopped else { return .refused }
        items.append(input)
        return items.count == 1 ? .first : .queued
    }

    /// Everything posted so far, oldest first, into `buffer`, whose storage the queue keeps for
    /// the next inputs: one lock round trip a batch, where taking the inputs and giving the
    /// buffer back took two, and neither side allocates once both buffers have grown. `buffer`
    /// comes empty (the thread's spare, emptied outside the lock); anything left in it is dropped.
    @inlinable
    public mutating func take(into buffer: inout [Input]) {
        if !buffer.isEmpty { buffer.removeAllKeepingBuffer() }
        swap(&items, &buffer)
    }

    /// Refuses every later input and returns those still waiting, for the caller to fail.
    public mutating func stop() -> [Input] {
        stopped = true
        defer { items = [] }
        return items
    }
}
