import SkyWire

extension ZMQEventLoop {
    /// Names a socket of the loop. Chosen by the caller, unique within one loop.
    public struct SocketID: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int
        @usableFromInline let label: Label

        /// Static text only, so that an id is a plain value: with a `String` in it, every copy
        /// of a message's id (in and out of the loop's lists) retained and released the name.
        @usableFromInline enum Label: Sendable {
            case name(StaticString)
            case numbered(StaticString)
        }

        /// Inlinable, as are its comparisons: a `static let` id made by a call was initialised
        /// lazily, and each use (a `case` matching a message's socket) went through `swift_once`.
        @inlinable public init(_ rawValue: Int, name: StaticString) {
            self.rawValue = rawValue
            label = .name(name)
        }

        /// A socket named `prefix-rawValue`, for sockets numbered as they are made (a client's
        /// connection to its broker): the name is built when it is shown, not each time a
        /// message is addressed to the socket (an interpolation on every call).
        @inlinable public init(_ rawValue: Int, numbered prefix: StaticString) {
            self.rawValue = rawValue
            label = .numbered(prefix)
        }

        public var name: String {
            switch label {
            case .name(let name): "\(name)"
            case .numbered(let prefix): "\(prefix)-\(rawValue)"
            }
        }

        @inlinable public static func == (lhs: SocketID, rhs: SocketID) -> Bool { lhs.rawValue == rhs.rawValue }
        @inlinable public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }
        public var description: String { name }
    }

    /// Everything the I/O thread needs to create, configure, bind and connect one socket.
    ///
    /// A description rather than a socket, because sockets may not cross threads: the loop's
    /// thread builds the socket from it.
    public struct SocketSpec: Sendable {
        public var id: SocketID
        public var type: ZMQSocketType
        public var options: [ZMQSocketOption]
        public var bind: [String]
        public var connect: [String]
        /// Read the ZAP `User-Id` of every received message (costs a metadata lookup per message).
        public var readUserID: Bool
        /// Read the peer's IP address (`Peer-Address`) of received messages: of those
        /// `peerAddressFilter` takes, if there is one (it sees the whole message, routing id
        /// included), of every one otherwise.
        public var readPeerAddress: Bool
        public var peerAddressFilter: (@Sendable (Frames) -> Bool)?
        /// Report these monitor events as ``Inbound/monitor(_:_:)``; `nil` for none.
        public var monitor: ZMQMonitorEvent.Kind.Set?

        public init(
            id: SocketID, type: ZMQSocketType, options: [ZMQSocketOption] = [],
            bind: [String] = [], connect: [String] = [], readUserID: Bool = false, readPeerAddress: Bool = false,
            peerAddressFilter: (@Sendable (Frames) -> Bool)? = nil, monitor: ZMQMonitorEvent.Kind.Set? = nil
        ) {
            self.readPeerAddress = readPeerAddress
            self.peerAddressFilter = peerAddressFilter
            self.id = id
            self.type = type
            self.options = options
            self.bind = bind
            self.connect = connect
            self.readUserID = readUserID
            self.monitor = monitor
        }
    }

    /// What the I/O thread reports. Delivered in batches: one batch per wake-up of the thread.
    public enum Inbound: Sendable {
        /// A message arrived on a socket.
        case message(SocketID, ZMQMessage)
        /// The socket monitor reported a transport event.
        case monitor(SocketID, ZMQMonitorEvent)
        /// A message could not be sent and was dropped: an unknown ROUTER peer (`EHOSTUNREACH`),
        /// a full peer queue on a ROUTER (`EAGAIN`), a closed socket, or another libzmq error.
        case sendFailed(SocketID, [[UInt8]], ZMQError)
        /// The loop's tick interval passed (only when the loop was started with a tick).
        case tick
        /// A value posted with ``ZMQEventLoop/post(input:)``, in order with what the thread read:
        /// how code on other threads (a finished task, a stop request) reaches an inline handler.
        case input(any Sendable)
        /// A socket asked for with ``ZMQEventLoop/requestOpen(_:)`` was opened (with the
        /// endpoints it was bound to) or could not be.
        case opened(SocketID, Result<[String], SetupError>)
    }

    /// One message to send: frames as arrays, or built in one buffer (see ``Frames``). Each
    /// is sent as it is, without a conversion.
    public struct Outbound: Sendable {
        public enum Content: Sendable {
            case arrays([[UInt8]])
            case frames(Frames)

            /// Each frame as an array (copies a buffer's small frames).
            public var arrays: [[UInt8]] {
                switch self {
                case .arrays(let arrays): arrays
                case .frames(let frames): frames.arrays
                }
            }
        }

        public var socket: SocketID
        public var content: Content

        public init(socket: SocketID, message: Frames) {
            self.socket = socket
            content = .frames(message)
        }

        public init(socket: SocketID, frames: [[UInt8]]) {
            self.socket = socket
            content = .arrays(frames)
        }

        /// Each frame as an array.
        public var frames: [[UInt8]] { content.arrays }
    }

    /// A socket could not be created, configured, bound or connected.
    public struct SetupError: Error, CustomStringConvertible {
        /// The socket that failed.
        public let socket: SocketID
        /// libzmq's error, naming the call and endpoint.
        public let underlying: ZMQError

        public var description: String { "\(socket): \(underlying)" }
    }

    enum Command: Sendable {
        case send(Outbound)
        /// Without a continuation, the outcome is reported as ``Inbound/opened(_:_:)``.
        /// Indirect: `CheckedContinuation` is not frozen, so held inline it made every command
        /// (a client's call posts one) copied, tagged and destroyed through the runtime.
        indirect case open(SocketSpec, CheckedContinuation<[String], any Error>?)
        case input(any Sendable)
        case close(SocketID, linger: Int32)
        case periodic(SocketID, [[UInt8]]?, every: Duration)
        case shutdown(linger: Int32)
    }

    /// The loop's inbound batches. Iterating it tells the loop what was consumed, which is what
    /// lets the loop stop reading when its consumer falls behind (see
    /// ``ZMQEventLoop/start(name:context:sockets:tick:maxPendingMessages:scheduling:handler:)``).
    public struct InboundBatches: AsyncSequence, Sendable {
        public typealias Element = [Inbound]
        let stream: AsyncStream<[Inbound]>
        let loop: ZMQEventLoop

        public struct AsyncIterator: AsyncIteratorProtocol {
            var base: AsyncStream<[Inbound]>.AsyncIterator
            let loop: ZMQEventLoop

            public mutating func next() async -> [Inbound]? {
                guard let batch = await base.next() else { return nil }
                loop.consumed(messages: batch.messageCount)
                return batch
            }
        }

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: stream.makeAsyncIterator(), loop: loop)
        }
    }

    struct Mailbox: Sendable {
        var commands: [Command] = []
        /// Jobs of tasks that prefer the loop as their executor, in the order they came.
        var jobs: [ZMQEventLoop.Job] = []
        /// Messages yielded and not yet taken by the consumer.
        var pendingMessages = 0
        /// The thread stopped reading sockets because ``pendingMessages`` reached the limit.
        var readingPaused = false
        /// The thread was signalled and has not taken the mailbox since (mirrored, for reading
        /// without the lock, by ``ZMQEventLoop/mailPending``).
        var wakePending = false
        var stopped = false
        var shutdownWaiters: [CheckedContinuation<Void, Never>] = []
        var finished = false
    }
}

extension [ZMQEventLoop.Inbound] {
    /// Received messages in a batch (ticks and reports do not count toward flow control).
    var messageCount: Int {
        reduce(0) { count, item in
            if case .message = item { count + 1 } else { count }
        }
    }
}
