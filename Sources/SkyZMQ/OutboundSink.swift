import SkyWire

/// Where a shell puts the messages it sends: a list of ``ZMQEventLoop/Outbound`` for a caller
/// that hands them to the loop later (a broker's recovery, a test), or the I/O thread's
/// ``ZMQEventLoop/Sender``, which sends each at once.
///
/// Why two: on the hot path a message built into an `Outbound`, appended, moved out again and
/// destroyed after its send paid copies of its ``FrameParts`` and generic value witnesses,
/// every message (docs/performance.md has the count).
public protocol OutboundSink {
    /// One message, sent in the order of the calls.
    mutating func append(_ message: ZMQEventLoop.Outbound)

    /// A message from its parts when it has them, else built in one buffer by `frames`.
    mutating func send(socket: ZMQEventLoop.SocketID, parts: consuming FrameParts?, otherwise frames: () -> Frames)
}

extension Array: OutboundSink where Element == ZMQEventLoop.Outbound {
    public mutating func send(
        socket: ZMQEventLoop.SocketID, parts: consuming FrameParts?, otherwise frames: () -> Frames
    ) {
        append(ZMQEventLoop.Outbound(socket: socket, parts: parts, otherwise: frames))
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

        public mutating func send(socket: SocketID, parts: consuming FrameParts?, otherwise frames: () -> Frames) {
            // Moved out of the optional, not copied.
            switch consume parts {
            case .some(let parts): runner.send(parts, on: socket)
            case .none: runner.send(Outbound(socket: socket, message: frames()))
            }
        }
    }
}
