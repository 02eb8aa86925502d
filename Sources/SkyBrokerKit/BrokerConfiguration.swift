import Foundation

/// Where the broker listens and how it guards its sockets.
public struct BrokerConfiguration: Sendable {
    /// The ROUTER clients connect to.
    public var clientsEndpoint: String
    /// The ROUTER workers connect to.
    public var workersEndpoint: String
    /// The XPUB (a PUB that also sees subscriptions) watchers subscribe to.
    public var eventsEndpoint: String
    /// Largest inbound frame in bytes; a peer sending a larger one is disconnected by libzmq.
    public var maxFrameSize: Int64
    /// Per-peer queue limit for messages the broker sends, in messages. High, because a ROUTER
    /// drops what exceeds it (counted as undeliverable).
    public var highWaterMark: Int32
    /// Per-peer queue limit for messages the broker has not read yet. Lower: beyond it a peer's
    /// messages wait on its side and in TCP, not in the broker's memory.
    public var receiveHighWaterMark: Int32 = 10_000
    /// Heartbeats, liveness, deliveries, queue bound, lease grace, events.
    public var routing: BrokerRouting
    /// How long replies made at shutdown may take to leave, in milliseconds.
    public var shutdownLinger: Int32 = 1000
    /// Most frames a message may have; more are dropped and counted (libzmq limits only the size
    /// of each frame, so ten frames under the limit would otherwise pass).
    public var maxFramesPerMessage = 16
    /// Most bytes a message may have over all its frames; a larger one is dropped and counted.
    public var maxMessageBytes: Int64
    /// How long a peer may take for the ZMTP and CURVE handshake, in milliseconds; a peer that
    /// connects and says nothing is disconnected then.
    public var handshakeTimeout: Int32 = 5000
    /// CURVE and per-role allow-lists; `nil` runs without authentication or encryption (for
    /// loopback and trusted networks only; the broker says so when it starts).
    public var security: BrokerSecurity?
    /// The directory of the job journal (`jobs.sqlite`, made if missing) and its lock; `nil`
    /// runs without durable jobs (submits are answered `journalUnavailable`). skybroker's
    /// `--state-dir` defaults to ``defaultStateDirectory(environment:)``.
    public var stateDirectory: String?
    /// A PostgreSQL store for the job journal instead of ``stateDirectory``: a libpq connection
    /// URI (`postgresql://user@host1:5432,host2:5432/sky?target_session_attrs=read-write`).
    /// The jobs then live in a database the operator replicates (docs/jobs.md).
    public var store: String?
    /// With ``store``: how long an active broker that stopped renewing its lease (dead,
    /// frozen, or cut off from the store) keeps it before a standby takes over.
    public var takeoverAfter: Duration = .seconds(5)

    /// skybroker's default state directory: `$XDG_STATE_HOME/sky`, else `$HOME/.local/state/sky`
    /// (the XDG base directory specification's place for state); `nil` if neither variable is
    /// set to an absolute path.
    ///
    /// Why not a path relative to the working directory (it was `./sky-state`): a broker started
    /// from another folder silently got an empty journal, and every job seemed lost. Under
    /// systemd the unit passes `--state-dir /var/lib/sky`.
    public static func defaultStateDirectory(environment: [String: String]) -> String? {
        // The specification says a relative value is invalid and to be ignored.
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return (state as NSString).appendingPathComponent("sky")
        }
        if let home = environment["HOME"], home.hasPrefix("/") {
            return (home as NSString).appendingPathComponent(".local/state/sky")
        }
        return nil
    }
    /// Journal bytes beyond which new jobs are refused as `overloaded`; 0 for no limit.
    public var journalMaxBytes = 0
    /// The journal's file name inside ``stateDirectory``.
    public static let journalFileName = "jobs.sqlite"

    public static let defaultClientsEndpoint = "tcp://127.0.0.1:5555"
    public static let defaultWorkersEndpoint = "tcp://127.0.0.1:5556"
    public static let defaultEventsEndpoint = "tcp://127.0.0.1:5557"

    public init(
        clientsEndpoint: String = BrokerConfiguration.defaultClientsEndpoint,
        workersEndpoint: String = BrokerConfiguration.defaultWorkersEndpoint,
        eventsEndpoint: String = BrokerConfiguration.defaultEventsEndpoint,
        maxFrameSize: Int64 = 16 << 20,
        highWaterMark: Int32 = 100_000,
        routing: BrokerRouting = .init()
    ) {
        self.routing = routing
        self.clientsEndpoint = clientsEndpoint
        self.workersEndpoint = workersEndpoint
        self.eventsEndpoint = eventsEndpoint
        self.maxFrameSize = maxFrameSize
        self.highWaterMark = highWaterMark
        // The largest body frame plus room for the other frames of a request.
        maxMessageBytes = maxFrameSize + (64 << 10)
    }

    /// Whether every endpoint is on the loopback interface (or a local transport).
    public var bindsLoopbackOnly: Bool {
        [clientsEndpoint, workersEndpoint, eventsEndpoint].allSatisfy { endpoint in
            endpoint.hasPrefix("ipc://") || endpoint.hasPrefix("inproc://") || endpoint.hasPrefix("tcp://127.")
                || endpoint.hasPrefix("tcp://localhost:") || endpoint.hasPrefix("tcp://[::1]:")
        }
    }
}
