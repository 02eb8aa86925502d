import SkyProtocol
import SkyZMQ
import Synchronization

/// What ``SkyClient/events()`` yields: first the cluster as it is, then every change.
public enum ClusterEvent: Sendable, Equatable {
    /// The broker's view at one moment (`seq` is the last event it includes). Comes first, and
    /// again whenever the broker restarted (its event numbers then begin anew).
    case snapshot(ClusterSnapshot)
    /// An event published after the last snapshot.
    case event(SkyEvent)
}

extension SkyClient {
    /// The broker's events, starting from a snapshot: the stream first yields
    /// ``ClusterEvent/snapshot(_:)``, then every event the broker publishes after it (worker
    /// connected or disconnected, stats, task events when the broker publishes them), none
    /// missed and none twice. When events were lost on the way (a gap in their numbers) or the
    /// broker restarted, a new snapshot comes before the events that follow. Ends when the
    /// client closes or the consumer stops iterating; throws when a snapshot cannot be had, and
    /// ``SkyError/unauthorized(_:)`` when a CURVE broker refuses this key as a watcher's.
    ///
    /// Uses the events endpoint of ``Configuration/events``.
    public nonisolated func events() -> AsyncThrowingStream<ClusterEvent, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: ClusterEvent.self)
        let feeder = Task {
            do {
                try await self.feedEvents(into: continuation)
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in feeder.cancel() }
        return stream
    }

    /// The events endpoint ``events()`` subscribes to: the configured one, or the clients
    /// endpoint's port + 2 (`nil` when that cannot be told).
    public nonisolated var eventsEndpoint: String? {
        if let events = configuration.events { return events }
        guard broker.hasPrefix("tcp://"), let colon = broker.lastIndex(of: ":"),
            let port = Int(broker[broker.index(after: colon)...])
        else { return nil }
        return "\(broker[..<colon]):\(port + 2)"
    }

    private func feedEvents(into output: AsyncThrowingStream<ClusterEvent, any Error>.Continuation) async throws {
        guard let endpoint = eventsEndpoint else {
            throw SkyError.brokerUnreachable(
                "cannot tell the events endpoint from \(broker); set SkyClient.Configuration.events")
        }
        try await startIfNeeded()
        guard let loop = shell.loop.load(), !closed else { throw SkyError.clientClosed }
        var lastSeq: UInt64 = 0
        var instance: String?
        var needSnapshot = true
        // Subscriptions that closed before their handshake, in a row: after a socket-type
        // mismatch (the clients or workers port given as the events port) libzmq never
        // reconnects, so each gets a new socket, and the third ends the stream naming the cause.
        var handshake = HandshakeWatch()
        while true {
            let id = Shell.socketID(nextEventSocket)
            nextEventSocket += 1
            let (raw, sink) = AsyncStream.makeStream(of: SkyEvent.self)
            shell.eventSinks.withLock { $0[id] = Shell.EventSink(continuation: sink) }
            let ended: Shell.EventSink?
            do {
                defer {
                    loop.close(id)
                }
                try await loop.open(
                    .init(
                        id: id, type: .sub,
                        options: [.subscribe([])] + (configuration.credentials?.socketOptions ?? []),
                        connect: [endpoint], monitor: Shell.eventMonitor))
                for await event in raw {
                    // The broker greets every new subscriber, so the first event proves the
                    // subscription is live: a snapshot taken now misses nothing. A greeting from
                    // another run of the broker means it restarted and counts anew; a number
                    // beyond the next one means events were lost on the way (a slow
                    // subscriber): either way, take a new snapshot.
                    if event.event == .brokerHello, let run = event.broker, run != instance { needSnapshot = true }
                    if event.seq > lastSeq + 1 { needSnapshot = true }
                    if needSnapshot {
                        let snapshot = try await clusterSnapshot()
                        output.yield(.snapshot(snapshot))
                        lastSeq = snapshot.seq
                        instance = snapshot.broker
                        needSnapshot = false
                    }
                    if event.seq > lastSeq {
                        output.yield(.event(event))
                        lastSeq = event.seq
                    }
                }
                ended = shell.eventSinks.withLock { $0.removeValue(forKey: id) }
            } catch {
                shell.eventSinks.withLock { $0.removeValue(forKey: id) }?.continuation.finish()
                throw error
            }
            if let refusal = ended?.refusal { throw SkyError.unauthorized(refusal) }
            // Only a subscription that closed before its handshake ends here with more to do.
            guard ended?.closedBeforeHandshake == true else { break }
            if handshake.closedBeforeHandshake() {
                throw SkyError.wrongEndpoint(
                    "\(endpoint) closed the events subscription during its handshake \(HandshakeWatch.strikes) times in a row:"
                        + " it is not the broker's events endpoint (its clients or workers port?; set"
                        + " SkyClient.Configuration.events, skywatch --events)"
                        + (configuration.credentials == nil
                            ? ", or the broker requires CURVE and this client has no credentials"
                            : ", or the broker public key given to this client is not the broker's"))
            }
        }
        try Task.checkCancellation()
    }
}
