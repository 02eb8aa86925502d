import Foundation
import SkyProtocol
import SkyWire
import SkyZMQ

/// The broker's limits and timings for routing: what `skybroker`'s flags set, and what an
/// application that embeds a ``Broker`` changes through ``BrokerConfiguration/routing``.
public struct BrokerRouting: Sendable {
    /// How often the broker and workers exchange heartbeats.
    public var heartbeatInterval: Duration = WorkerToBroker.defaultHeartbeatInterval
    /// Missed intervals before a worker is declared dead.
    public var liveness: Int = WorkerToBroker.defaultLiveness
    /// Deliveries of one request before it fails with `workerLost` (at most 65,535 count).
    public var maxDeliveries: Int = 3
    /// Whether debug log lines are wanted (the shell sets it from its logger): lines of a
    /// level that is off are not even built, since some come once per message.
    package var logsDebug = false
    /// Requests that may wait for a worker.
    public var queueLimit: Int = 100_000
    /// Services the broker may know at once (served by a worker, with requests waiting, or
    /// answered this stats period): a request naming one more is refused `overloaded`, so
    /// that requests for ever new names cannot grow the broker. As many as requests may
    /// wait (``queueLimit``'s default); at most 1,048,575, the numbers an arrival number can
    /// name. Workers' services are taken up to that.
    public var waitingServicesLimit: Int = 100_000
    /// Bytes of request bodies that may wait for a worker.
    public var queueBytesLimit: Int = 256 << 20
    /// The share of ``queueLimit`` and ``queueBytesLimit`` one client may hold, so that one
    /// client's flood cannot refuse everybody else's work.
    public var clientQueueShare: Double = 0.5
    /// The longest a request waits for a worker, whatever its timeout (0 = none included):
    /// requests of a client that went away do not fill the queue forever.
    public var maxWait: Duration = .seconds(3600)
    /// How long a request may wait while no connected worker serves its service, before it
    /// is answered `noWorkers` (a request can ask for another grace in its header).
    public var noWorkersGrace: Duration = .seconds(2)
    /// How long past its deadline a task may run before it is taken from its worker; for a
    /// job's attempt (cancelled at its timeout), how long the worker has to answer the cancel
    /// before it is told again.
    public var leaseGrace: Duration = .seconds(5)
    /// Most expired requests answered per tick; with more due, the machine asks for the next
    /// tick at once (``hasExpiryBacklog``), after the shell has served its sockets again.
    package var expiryBatch: Int = 100
    /// Longest time one tick spends on expiries and due jobs; the rest waits for the next
    /// tick, asked for at once (``hasExpiryBacklog``). See ``WorkBudget``.
    public var tickWorkLimit: Duration = .milliseconds(4)
    /// The clock the tick reads to keep to ``tickWorkLimit`` (inputs carry their own `now`;
    /// this one measures the work as it goes). Tests replace it.
    package var workClock: @Sendable () -> MonotonicInstant = { MonotonicInstant.now }
    /// Services' rate limits (`skybroker --rate-limit`): a limit set through `mmi.limits.set`
    /// (kept in the journal) replaces the one given here for its service until it is removed.
    public var rateLimits: [String: RateLimit] = [:]
    /// Services' per-key rate limits (`skybroker --key-rate-limit`; each has a ``RateLimit/key``),
    /// replaced in the same way by a per-key limit set through `mmi.limits.set`.
    public var keyRateLimits: [String: RateLimit] = [:]
    /// How often the broker's loop ticks (expiries, heartbeats, deadlines, stats): a tenth of
    /// the heartbeat interval keeps detection within 10 % of the configured times.
    var tickInterval: Duration { max(.milliseconds(10), heartbeatInterval / 10) }
    /// How often `broker.stats` is published.
    public var statsInterval: Duration = .seconds(1)
    /// Least time between two `broker.hello` events: subscriptions that come faster share one.
    public var helloInterval: Duration = .milliseconds(200)
    /// Most answers per second to misdirected or refused peers, per port.
    public var refusalsPerSecond: Int = 10
    /// Most log lines per second of each text about what peers send wrong (malformed, over
    /// the limits, unauthenticated, refused, stale); the rest are counted and summarised.
    public var peerLinesPerSecond: Int = 10
    /// Queued bytes, or waiting requests, above which the queue's draining gives its storage
    /// back and returns freed memory to the system.
    public var memoryReleaseThreshold: Int = 32 << 20
    public var memoryReleaseCount: Int = 10_000
    /// Publish `task.dispatched` and `task.completed` for every task (costs throughput).
    public var taskEvents: Bool = false
    /// Measures the process's memory for snapshots; `nil` leaves it out (tests).
    package var memoryProbe: (@Sendable () -> ProcessMemory)?
    /// Names this run of the broker in greetings and snapshots.
    package var instance = RequestID.random().description
    /// This run's turn at a shared job store (PostgreSQL), which it announces in `broker.active`
    /// and every `broker.hello`; `nil` with a journal of its own or none.
    package var epoch: Int64?
    /// Whether the shell has a journal for durable jobs; without one, submits are answered
    /// `journalUnavailable`.
    package var journal = false
    /// Journal bytes beyond which new jobs are refused as `overloaded`; 0 for no limit.
    package var journalMaxBytes = 0
    /// Unfinished jobs the broker holds in memory at most (queued, scheduled, running), and
    /// the bytes of their tasks; beyond either, submits are refused as `overloaded` (the
    /// journal keeps what was accepted; this bound keeps the broker's memory finite).
    public var maxHeldJobs = 1_000_000
    public var maxHeldJobBytes = 1 << 30
    /// How often the journal deletes expired outcomes and is measured.
    public var journalMaintenanceInterval: Duration = .seconds(1)
    /// How long a failed job is kept at least (its own retention if longer): failed jobs wait
    /// there for an operator's bulk retry or delete (`--failed-retention`).
    public var failedRetention: Duration = .seconds(7 * 86_400)
    /// The longest an `mmi.jobs.wait` is held before it is answered "not yet".
    public var jobWaitHold: Duration = BrokerService.jobWaitHold
    /// Wall-clock time in milliseconds since 1970: job ids, not-before times and retention
    /// are wall-clock facts, since they outlive the process. Tests replace it.
    package var wallClock: @Sendable () -> Int64 = {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }
    /// Seeds the random part of job ids; `nil` seeds it from the system (tests fix it).
    package var jobIDSeed: UInt64?
    /// The largest frame the sockets take (`--max-frame-size`), told to clients in
    /// `mmi.features` so that they refuse a larger task instead of sending it.
    package var maxFrameSize: Int64 = 16 << 20
    /// The endpoints named to peers that connected to the wrong one.
    package var clientsEndpoint = "the broker's clients endpoint"
    package var workersEndpoint = "the broker's workers endpoint"
    /// The events endpoint bound, told to clients in `mmi.features`.
    package var eventsEndpoint: String?

    public init() {}

    /// How long a worker may stay silent.
    package var expiry: Duration { heartbeatInterval * liveness }

    /// Waiting requests one client may hold.
    var clientQueueLimit: Int { max(1, Int(Double(queueLimit) * clientQueueShare)) }
    /// Waiting body bytes one client may hold.
    var clientQueueBytesLimit: Int { max(1, Int(Double(queueBytesLimit) * clientQueueShare)) }
}
