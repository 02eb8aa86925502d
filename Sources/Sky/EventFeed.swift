import SkyProtocol
import SkyWire
import SkyZMQ
import Synchronization

/// What ``SkyClient/events()`` reads from: one events subscription at a time, and the rule that
/// makes its output whole (a snapshot first, and again after a gap or a broker restart).
///
/// Driven by the consumer: each ``next()`` reads the subscription until it has something to
/// yield, so nothing queues in front of a slow consumer beyond the subscription's buffer
/// (``maxBuffered`` events by default), where the oldest are dropped, which the next event read
/// shows as a gap. When the stream is dropped, the feed is too, and its socket is closed.
actor EventFeed {
    /// Events that may wait for a slow consumer; beyond them the oldest are dropped.
    static let maxBuffered = 10_000

    /// One SUB socket and the events the I/O thread decoded from it.
    final class Subscription: Sendable {
        let id: ZMQEventLoop.SocketID
        let endpoint: String
        let events: AsyncStream<SkyEvent>
        private let loop: ZMQEventLoop
        private let shell: SkyClient.Shell
        private let closed = Atomic<Bool>(false)

        init(
            id: ZMQEventLoop.SocketID, endpoint: String, events: AsyncStream<SkyEvent>, loop: ZMQEventLoop,
            shell: SkyClient.Shell
        ) {
            self.id = id
            self.endpoint = endpoint
            self.events = events
            self.loop = loop
            self.shell = shell
        }

        /// Closes the socket; returns what its sink learned (a refusal, a close before the
        /// handshake). Only the first call does anything.
        func close() -> SkyClient.Shell.EventSink? {
            guard !closed.exchange(true, ordering: .relaxed) else { return nil }
            loop.close(id)
            let sink = shell.eventSinks.withLock { $0.removeValue(forKey: id) }
            sink?.continuation.finish()
            return sink
        }

        deinit { _ = close() }
    }

    private let client: SkyClient
    /// Events the subscription may hold for the consumer.
    private let buffered: Int
    private var subscription: Subscription?
    private var iterator: AsyncStream<SkyEvent>.Iterator?
    /// An event read together with the snapshot yielded before it.
    private var pending: SkyEvent?
    /// Which events to pass on, and when a snapshot comes first.
    private var sequence = EventSequence()
    private var ended = false
    /// Subscriptions that closed before their handshake, in a row: after a socket-type mismatch
    /// (the clients or workers port given as the events port) libzmq never reconnects, so each
    /// gets a new socket, and the third ends the stream naming the cause.
    private var handshake = HandshakeWatch()

    init(client: SkyClient, buffered: Int) {
        self.client = client
        self.buffered = max(1, buffered)
    }

    /// The next snapshot or event; `nil` when the client closed.
    func next() async throws -> ClusterEvent? {
        guard !ended else { return nil }
        do {
            return try await read()
        } catch {
            ended = true
            _ = subscription?.close()
            subscription = nil
            throw error
        }
    }

    private func read() async throws -> ClusterEvent? {
        if let event = pending {
            pending = nil
            return .event(event)
        }
        while true {
            if subscription == nil {
                let opened = try await client.subscribeToEvents(buffered: buffered)
                subscription = opened
                iterator = opened.events.makeAsyncIterator()
                sequence.resubscribed()
            }
            var events = iterator
            let next = await events?.next(isolation: self)
            iterator = events
            try Task.checkCancellation()
            guard let event = next else {
                if try subscriptionEnded() { continue }
                ended = true
                return nil
            }
            // The broker greets every new subscriber, so the first event proves the
            // subscription is live: a snapshot taken now misses nothing (EventSequence).
            switch sequence.read(event) {
            case .deliver(let event):
                return .event(event)
            case .skip:
                continue
            case .snapshot:
                let snapshot = try await client.clusterSnapshot()
                pending = sequence.took(snapshot, after: event)
                return .snapshot(snapshot)
            }
        }
    }

    /// The subscription's stream ended: returns whether to open a new one (its connection
    /// closed before a handshake), throws a refusal or the third such close in a row, and
    /// returns `false` when the client closed.
    private func subscriptionEnded() throws -> Bool {
        guard let current = subscription else { return false }
        subscription = nil
        iterator = nil
        let sink = current.close()
        if let refusal = sink?.refusal { throw SkyError.unauthorized(refusal) }
        // Only a subscription that closed before its handshake ends here with more to do.
        guard sink?.closedBeforeHandshake == true else { return false }
        if handshake.closedBeforeHandshake() {
            throw SkyError.wrongEndpoint(
                "\(current.endpoint) closed the events subscription during its handshake \(HandshakeWatch.strikes) times in a row:"
                    + " it is not the broker's events endpoint (its clients or workers port?; set"
                    + " SkyClient.Configuration.events, skywatch --events)"
                    + (client.configuration.credentials == nil
                        ? ", or the broker requires CURVE and this client has no credentials"
                        : ", or the broker public key given to this client is not the broker's"))
        }
        return true
    }
}
