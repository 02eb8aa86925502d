import SkyProtocol

/// The rule that makes an events stream whole, as a value: which events to pass on, which to
/// drop, and when a snapshot must come first. ``EventFeed`` reads the subscription and asks it.
///
/// Events are numbered per run of the broker, from 1 at its start; a run names itself in its
/// `broker.hello`, which greets each new subscription before anything else it sends there. So
/// the subscription's events belong to the run of the last hello read, and a hello of another
/// run than the snapshot's means the broker restarted. Events of a run that is not the
/// snapshot's (left in the subscription from a broker that has since restarted) say nothing
/// about the present and are dropped; taking their numbers would drop the new run's events
/// up to the old run's last number, and with them workers that registered (seen: a dashboard
/// that showed no workers for good after a broker restart).
struct EventSequence: Sendable, Equatable {
    enum Decision: Sendable, Equatable {
        /// Pass the event on.
        case deliver(SkyEvent)
        /// Read on: the event is old, a repeat, or of another run.
        case skip
        /// Take a snapshot, give it to ``took(_:after:)`` with this event, and pass on what
        /// that returns.
        case snapshot
    }

    /// The number of the last event passed on, or of the last snapshot.
    private(set) var lastSeq: UInt64 = 0
    /// The run the last snapshot came from: what the consumer's state describes.
    private(set) var snapshotRun: String?
    /// The run the subscription's events come from now: the last hello's.
    private(set) var streamRun: String?
    private var needSnapshot = true

    /// The subscription was opened anew: until its hello, nothing says which run its events
    /// come from.
    mutating func resubscribed() {
        streamRun = nil
    }

    /// An event read from the subscription.
    mutating func read(_ event: SkyEvent) -> Decision {
        if event.event == .brokerHello, let run = event.broker {
            streamRun = run
            if run != snapshotRun { needSnapshot = true }
        }
        if needSnapshot { return .snapshot }
        if let streamRun, streamRun != snapshotRun { return .skip }
        // A number beyond the next one: events were lost on the way (a slow subscriber, here
        // or in libzmq).
        if event.seq > lastSeq + 1 {
            needSnapshot = true
            return .snapshot
        }
        guard event.seq > lastSeq else { return .skip }
        lastSeq = event.seq
        return .deliver(event)
    }

    /// The snapshot taken for `event`: returns `event` if it is to be passed on after it (it came
    /// after the snapshot, from the snapshot's run).
    ///
    /// The event was read before the snapshot was asked for, so an event of the snapshot's run
    /// is numbered at most one past it. One numbered beyond is of another run, without a hello
    /// before it: a paused broker that wakes after a standby took over sends on what its
    /// socket still held. Taking its number would drop the new run's events up to it (seen: a
    /// watcher silent for good after a takeover); it is dropped, and so is the next such one.
    mutating func took(_ snapshot: ClusterSnapshot, after event: SkyEvent) -> SkyEvent? {
        lastSeq = snapshot.seq
        snapshotRun = snapshot.broker
        needSnapshot = false
        guard streamRun == snapshot.broker, event.seq == lastSeq + 1 else { return nil }
        lastSeq = event.seq
        return event
    }
}
