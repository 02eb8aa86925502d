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
    /// client closes; throws when a snapshot cannot be had, and
    /// ``SkyError/unauthorized(_:)`` when a CURVE broker refuses this key as a watcher's.
    ///
    /// A consumer that falls behind costs bounded memory: at most 10,000
    /// events wait for it; older ones are dropped, and it reads a new snapshot where they were
    /// (as for events lost on the network). The subscription ends when the stream is no longer
    /// iterated or held.
    ///
    /// Uses the events endpoint of ``Configuration/events``.
    public nonisolated func events() -> AsyncThrowingStream<ClusterEvent, any Error> {
        events(buffered: EventFeed.maxBuffered)
    }

    /// ``events()`` with at most `buffered` events waiting for the consumer.
    nonisolated func events(buffered: Int) -> AsyncThrowingStream<ClusterEvent, any Error> {
        // Pulled, not pushed: each `next()` reads one event, so events wait in the
        // subscription's bounded buffer, not in an unbounded stream in front of the consumer
        // (an unbounded one grew without limit behind a blocked consumer: docs/client.md, "Events").
        let feed = EventFeed(client: self, buffered: buffered)
        return AsyncThrowingStream(unfolding: { try await feed.next() })
    }

    /// The events endpoint configured, or the clients endpoint's port + 2 (`nil` when that
    /// cannot be told): where ``events()`` subscribes unless the broker says another
    /// (`mmi.features`, asked as it subscribes).
    public nonisolated var eventsEndpoint: String? {
        eventsEndpoints.first
    }

    /// Every events endpoint the subscription connects to: ``Configuration/events`` (several
    /// separated by commas), else each broker endpoint's host with its port + 2. Only the active
    /// broker of several on one job store binds its events endpoint, so the subscription hears
    /// the active one, whichever it is. Empty when no endpoint can be told.
    public nonisolated var eventsEndpoints: [String] {
        if let events = configuration.eventsList { return events }
        var derived: [String] = []
        for broker in endpoints {
            guard broker.hasPrefix("tcp://"), let colon = broker.lastIndex(of: ":"),
                let port = Int(broker[broker.index(after: colon)...])
            else { return [] }
            derived.append("\(broker[..<colon]):\(port + 2)")
        }
        return derived
    }

    /// The events endpoint the broker says it bound (`mmi.features`), when none is configured
    /// and the client has one broker endpoint (with several, only the active one answers): the
    /// port + 2 rule does not hold for a broker on chosen or random ports or on `ipc://`, and a
    /// subscription there hears nothing, silently. A wildcard host (`0.0.0.0`, `::`) is
    /// replaced by the host this client reaches the broker at. `nil`: none configured, or the
    /// broker did not say within the connect timeout.
    func toldEventsEndpoints() async -> [String]? {
        guard configuration.eventsList == nil, endpoints.count == 1,
            let told = await brokerFeatures()?.eventsEndpoint
        else { return nil }
        return [Self.reachable(told, via: endpoints[0])]
    }

    /// `endpoint` with a wildcard host replaced by `broker`'s host (``ZMQEndpoint/reachable(_:via:)``).
    static func reachable(_ endpoint: String, via broker: String) -> String {
        ZMQEndpoint.reachable(endpoint, via: broker)
    }

    /// Opens one events subscription: a SUB socket on the events endpoint whose events arrive,
    /// at most `buffered` of them waiting, in the returned stream.
    func subscribeToEvents(buffered: Int) async throws -> EventFeed.Subscription {
        let endpoints = await toldEventsEndpoints() ?? eventsEndpoints
        guard let endpoint = endpoints.first else {
            throw SkyError.wrongEndpoint(
                "cannot tell the events endpoint from \(broker), and the broker did not say it (none answered within the connect timeout, or it predates saying it); set it: SkyClient.Configuration.events, or --events for skywatch and skyweb"
            )
        }
        try await startIfNeeded()
        guard let loop = shell.loop.load(), !closed else { throw SkyError.clientClosed }
        let id = Shell.socketID(nextEventSocket)
        nextEventSocket += 1
        let (raw, sink) = AsyncStream.makeStream(of: SkyEvent.self, bufferingPolicy: .bufferingNewest(buffered))
        shell.eventSinks.withLock { $0[id] = Shell.EventSink(continuation: sink) }
        let subscription = EventFeed.Subscription(id: id, endpoint: endpoint, events: raw, loop: loop, shell: shell)
        do {
            try await loop.open(
                .init(
                    id: id, type: .sub, options: [.subscribe([])] + (configuration.credentials?.socketOptions ?? []),
                    connect: endpoints, monitor: Shell.eventMonitor))
        } catch {
            _ = subscription.close()
            throw error
        }
        return subscription
    }
}
