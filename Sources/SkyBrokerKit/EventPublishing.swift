import SkyProtocol
import SkyWire

/// The broker's side of its event socket: the events' numbers, the topics watchers subscribed
/// to, and the pace of greetings.
///
/// An XPUB tells the broker each topic's first subscription and last unsubscription. A task or
/// job event, one per message, is not built while no topic takes it; its number is taken all
/// the same, so numbering does not depend on who watches. Subscriptions that come faster than
/// the hello interval share one greeting, sent when the interval has passed.
struct EventPublishing: Sendable {
    /// The last event's number.
    private(set) var lastSeq: UInt64 = 0
    private var topics: Set<[UInt8]> = []
    /// When the next `broker.hello` may go out, and whether a subscription waits for one.
    private var nextHelloAllowed: MonotonicInstant?
    private var helloPending = false
    /// `broker.active` went out (once a run, with the first stats a subscriber takes).
    var activeAnnounced = false

    /// Takes the next event's number.
    @inline(__always)
    mutating func number() -> UInt64 {
        lastSeq += 1
        return lastSeq
    }

    /// Whether a subscribed topic takes events of `kind` (a topic takes the events whose name
    /// starts with it; the empty topic takes all).
    func isWatched(_ kind: EventKind) -> Bool {
        if topics.isEmpty { return false }
        if topics.contains([]) { return true }
        return topics.contains { kind.rawValue.utf8.starts(with: $0) }
    }

    /// A watcher subscribed to `topic` (the first for it), or the last one left it.
    mutating func subscription(_ topic: [UInt8], subscribed: Bool) {
        if subscribed { topics.insert(topic) } else { topics.remove(topic) }
    }

    /// Someone subscribed: whether to greet now; otherwise the greeting waits for the interval.
    mutating func subscriberJoined(now: MonotonicInstant) -> Bool {
        if let allowed = nextHelloAllowed, now < allowed {
            helloPending = true
            return false
        }
        return true
    }

    /// Whether a greeting held back is due.
    func isHelloDue(now: MonotonicInstant) -> Bool { helloPending && now >= nextHelloAllowed ?? now }

    /// A greeting went out: the next waits `interval`.
    mutating func greeted(now: MonotonicInstant, interval: Duration) {
        helloPending = false
        nextHelloAllowed = now + interval
    }
}
