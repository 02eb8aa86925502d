import CoreMetrics
import Logging
import SkyTasks
import SkyZMQ
import Tracing

extension SkyClient {
    /// Client-wide settings. Every field has a default that suits a cluster on one network.
    public struct Configuration: Sendable {
        /// Options for calls that pass none.
        public var defaults: ScanOptions = .default
        /// How long a call waits for a connection to the broker before its attempt fails with
        /// ``SkyError/brokerUnreachable(_:)`` (and is retried by the default policy); with several
        /// broker endpoints, also how long one is tried before the next.
        public var connectTimeout: Duration = .seconds(5)
        /// The broker's events endpoint, for ``SkyClient/events()`` (several, of an active broker
        /// and its standbys, separated by commas). `nil`: each clients endpoint's host with its
        /// port + 2 (skybroker's default layout: 5555 clients, 5557 events).
        public var events: String?

        /// ``events`` as a list: the endpoints between its commas.
        var eventsList: [String]? {
            events?.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        /// Runs tasks in this process when the broker is unreachable or has no worker for the
        /// task's service, through the same `scan` call (location transparency). Only services
        /// the system has a handler for fall back.
        public var localFallback: ScanSystem?
        /// With ``localFallback``: how long a call waits for a first connection before running
        /// locally.
        public var localFallbackWait: Duration = .seconds(1)
        /// Where all timeouts, deadlines and backoffs take their time from. Tests pass a manual clock.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// Seeds the backoff jitter; `nil` draws a seed at random.
        public var jitterSeed: UInt64?
        public var logger = Logger(label: "sky.client")
        /// CURVE: the broker's public key and this client's key pair. Required by a broker that
        /// runs with `--secret-key`; this client's public key must be on its client allow-list.
        public var credentials: CurveCredentials?
        /// The largest encoded task sent; a larger one fails at once with
        /// ``SkyError/requestTooLarge(bytes:limit:)``. Match the broker's `--max-frame-size`.
        public var maxRequestBytes = 16 << 20
        /// How long the broker may hold a call while no connected worker serves its service,
        /// before it answers ``SkyError/noWorkers(service:)``; `nil` takes the broker's
        /// `--no-workers-grace` (2 s by default). Raise it when workers start after clients.
        public var noWorkersGrace: Duration?
        /// Where the client's metrics go (calls, attempts, durations, calls in flight; see
        /// docs/operations.md): `nil` uses the process's `MetricsSystem` backend, which is a
        /// no-op unless the application bootstrapped one (swift-prometheus, for example).
        public var metricsFactory: (any MetricsFactory)?
        /// Where the client's spans go: each call is a client span whose context travels with
        /// the request, so the broker's and the worker's spans join its trace. `nil` uses the
        /// process's `InstrumentationSystem` tracer, a no-op unless the application bootstrapped
        /// one (swift-otel, for example; docs/operations.md "Tracing").
        public var tracer: (any Tracer)?

        public init() {}
    }

    /// What the client has done so far, for diagnostics and tests. The counters read as its
    /// own fields: `statistics.retries`.
    @dynamicMemberLookup
    public struct Statistics: Sendable, Equatable {
        public var counters: ClientCounters
        /// Calls run by the local fallback.
        public var localRuns: Int
        /// Remote calls in flight.
        public var callsInFlight: Int
        /// Suspended callers of every kind the client holds: waiting for a reply, for a
        /// connection, or for events. Zero when nothing is in flight; a test hook for leaks.
        public var suspendedCallers: Int
        /// Whether a connection to the broker is up.
        public var connected: Bool
        /// The broker endpoint in use.
        public var endpoint: String

        /// Calls made, local runs included.
        public var calls: Int { counters.calls + localRuns }

        public subscript<Value>(dynamicMember counter: KeyPath<ClientCounters, Value>) -> Value {
            counters[keyPath: counter]
        }
    }
}
