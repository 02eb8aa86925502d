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
    public var routing: BrokerStateMachine.Configuration
    /// How long replies made at shutdown may take to leave, in milliseconds.
    public var shutdownLinger: Int32 = 1000

    public static let defaultClientsEndpoint = "tcp://127.0.0.1:5555"
    public static let defaultWorkersEndpoint = "tcp://127.0.0.1:5556"
    public static let defaultEventsEndpoint = "tcp://127.0.0.1:5557"

    public init(
        clientsEndpoint: String = BrokerConfiguration.defaultClientsEndpoint,
        workersEndpoint: String = BrokerConfiguration.defaultWorkersEndpoint,
        eventsEndpoint: String = BrokerConfiguration.defaultEventsEndpoint,
        maxFrameSize: Int64 = 16 << 20,
        highWaterMark: Int32 = 100_000,
        routing: BrokerStateMachine.Configuration = .init()
    ) {
        self.routing = routing
        self.clientsEndpoint = clientsEndpoint
        self.workersEndpoint = workersEndpoint
        self.eventsEndpoint = eventsEndpoint
        self.maxFrameSize = maxFrameSize
        self.highWaterMark = highWaterMark
    }
}
