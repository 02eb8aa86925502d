import Foundation
import SkyJournal

extension PostgresJobStore {
    /// How a broker waits while another is active on the store, and when it takes over.
    public struct Standby: Sendable {
        /// How this broker names itself in the lease (its host, process and clients endpoint):
        /// what standbys and operators see of the active broker.
        public var name: String
        /// The longest a broker that stopped renewing its lease keeps the store: after that a
        /// standby ends its session and takes over (`skybroker --takeover-after`).
        public var takeoverAfter: Duration
        /// How often the lock is tried and the lease read while waiting.
        public var poll: Duration
        /// Told (on the journal's thread) when the active broker seen changes.
        public var waiting: @Sendable (Lease) -> Void
        /// Told (on the journal's thread) when a lapsed lease's session was ended (`true`), or
        /// could not be (`false`: it had ended already, or this user may not end it).
        public var evicted: @Sendable (Lease, Bool) -> Void
        /// Told (on the journal's thread) when the server could not be reached while waiting;
        /// once, until it is reached again.
        public var unreachable: @Sendable (JournalError) -> Void
        /// `false`: a broker that could not be found once it took over (its ports are the
        /// kernel's pick) does not wait; it is refused with ``JournalError/inUse(store:)``.
        public var mayWait = true
        /// Asked (on the journal's thread) at every poll: `true` once the broker is told to stop
        /// (SIGTERM) while it waits. It then leaves `sky_standbys` and the wait throws
        /// ``JournalError/stoppedWaiting(store:)``.
        public var stop: @Sendable () -> Bool = { false }

        public init(
            name: String, takeoverAfter: Duration = .seconds(5), poll: Duration = .milliseconds(200),
            waiting: @escaping @Sendable (Lease) -> Void = { _ in },
            evicted: @escaping @Sendable (Lease, Bool) -> Void = { _, _ in },
            unreachable: @escaping @Sendable (JournalError) -> Void = { _ in }
        ) {
            self.unreachable = unreachable
            self.name = name
            self.takeoverAfter = takeoverAfter
            self.poll = poll
            self.waiting = waiting
            self.evicted = evicted
        }

        /// The active broker renews its lease this often (and with every transaction).
        public var renewEvery: Duration { takeoverAfter / 5 }
        /// This broker's lease, once active, lapses after this long unrenewed (``lapse(of:)``).
        public var lapseAfter: Duration { Self.lapse(of: takeoverAfter) }
        /// An active broker whose lease went unrenewed this long while a standby waits steps
        /// down, a renewal before it lapses; a statement waits this long (1 s at least) for a
        /// silent server (``PostgresJobStore/init(uri:standby:lost:renewed:)``).
        public var stepDownAfter: Duration { lapseAfter - renewEvery }

        /// A lease not renewed for 3/5 of the active broker's `takeoverAfter` has lapsed: three
        /// renewals missed, leaving the rest to end the session, take the lock and start. The
        /// active broker's own setting counts (it is in the lease), so that a standby started
        /// with a shorter one does not depose a healthy broker.
        public static func lapse(of takeoverAfter: Duration) -> Duration { takeoverAfter * 3 / 5 }
    }

    /// The store's lease as a standby reads it.
    public struct Lease: Sendable, Equatable {
        /// The active broker's epoch.
        public var epoch: Int64
        /// How the active broker named itself (``Standby/name``).
        public var holder: String
        /// The server process of the active broker's session (0: not known).
        public var holderSession: Int32
        /// How long ago the lease was renewed, by the server's clock.
        public var silence: Duration
        /// The active broker's `--takeover-after`: its lease lapses at ``Standby/lapse(of:)`` of it.
        public var takeoverAfter: Duration
    }
}

extension Duration {
    /// Seconds, for `Thread.sleep`.
    var inSecondsForSleep: TimeInterval {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
