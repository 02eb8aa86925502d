import SkyWire

/// Where a shell puts the messages it sends: a list of ``ZMQEventLoop/Outbound`` for a caller
/// that hands them to the loop later (a broker's recovery, a test), or the I/O thread's
/// ``ZMQEventLoop/Sender``, which sends each at once.
///
/// Why two: on the hot path a message built into an `Outbound`, appended, moved out again and
/// destroyed after its send paid copies and generic value witnesses, every message
/// (docs/performance.md has the count).
public protocol OutboundSink {
    /// One message, sent in the order of the calls.
    mutating func append(_ message: ZMQEventLoop.Outbound)

    /// A message lent from its parts: sent before this returns, or copied to be sent later.
    mutating func send(socket: ZMQEventLoop.SocketID, parts: FrameParts)
}

extension Array: OutboundSink where Element == ZMQEventLoop.Outbound {
    public mutating func send(socket: ZMQEventLoop.SocketID, parts: FrameParts) {
        append(ZMQEventLoop.Outbound(socket: socket, message: Frames(parts)))
    }
}

extension ZMQEventLoop {
    /// An inline handler's way out: each message goes to its socket at once, from the I/O
    /// thread, as the thread sends everything (a full DEALER keeps it until there is room; a
    /// ROUTER that cannot deliver it reports ``Inbound/sendFailed(_:_:_:)`` in the next batch).
    /// Valid only during the handler's call, on the I/O thread: keep no copy of it.
    public struct Sender: OutboundSink {
        let runner: ZMQEventLoopRunner

        public mutating func append(_ message: Outbound) {
            runner.send(message)
        }

        public mutating func send(socket: SocketID, parts: FrameParts) {
            runner.send(parts, on: socket)
        }
    }
}
