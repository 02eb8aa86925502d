import ArgumentParser
import Foundation
import Logging
import SkyBrokerKit
import SkyCLISupport
import SkyPostgres
import SkyProtocol
import SkyWire
import SkyZMQ

/// `skybroker [serve]`: runs the broker.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Routes Sky tasks from clients to workers and publishes cluster events (the default).",
        discussion: """
            Clients connect to --clients, workers to --workers, watchers (skywatch) to --events.
            A tcp port of * picks a free port; the endpoints actually bound are printed on
            standard output as one line: "skybroker ready clients=... workers=... events=...".
            Workers that miss --liveness heartbeats of --heartbeat-interval seconds are declared dead
            and their tasks run elsewhere. SIGTERM or SIGINT stops it: waiting and running requests
            are answered brokerShuttingDown, workers are told, and it exits 0; a standby waiting on
            --store leaves at once, exit 0.
            With --secret-key, every socket runs CURVE and admits only the keys on its role's
            allow-list (--client-keys, --worker-keys, --watcher-keys: a directory of .pub files or
            a file with one key per line, re-read when it changes); see docs/security.md.
            """)

    /// The defaults of the flags below come from the library's configuration types, so the
    /// command line, the library and docs/operations.md cannot disagree (a test checks all three).
    private static let defaults = BrokerConfiguration()

    @Option(help: "Endpoint for clients (ROUTER).")
    var clients = BrokerConfiguration.defaultClientsEndpoint

    @Option(help: "Endpoint for workers (ROUTER).")
    var workers = BrokerConfiguration.defaultWorkersEndpoint

    @Option(help: "Endpoint for event subscribers (PUB).")
    var events = BrokerConfiguration.defaultEventsEndpoint

    @Option(parsing: .unconditional, help: "Largest frame a peer may send, in bytes; larger ones disconnect the peer.")
    var maxFrameSize: Int64 = Self.defaults.maxFrameSize

    @Option(parsing: .unconditional, help: "Seconds between heartbeats with workers.")
    var heartbeatInterval: Double = Self.defaults.routing.heartbeatInterval.inSeconds

    @Option(parsing: .unconditional, help: "Missed heartbeat intervals before a worker is declared dead.")
    var liveness = Self.defaults.routing.liveness

    @Option(parsing: .unconditional, help: "Deliveries of one request before it fails with workerLost.")
    var maxDeliveries = Self.defaults.routing.maxDeliveries

    @Option(parsing: .unconditional, help: "Requests that may wait for a worker; more are refused as overloaded.")
    var queueLimit = Self.defaults.routing.queueLimit

    @Option(
        parsing: .unconditional,
        help: "Bytes of request bodies that may wait for a worker; more are refused as overloaded.")
    var queueBytes = Self.defaults.routing.queueBytesLimit

    @Option(
        parsing: .unconditional,
        help: "Share (0.01-1) of the queue limits one client may hold; beyond it only its requests are refused.")
    var clientQueueShare = Self.defaults.routing.clientQueueShare

    @Option(
        parsing: .unconditional,
        help: "Seconds a request may wait for a worker at most, whatever its timeout (also with none).")
    var maxWait: Double = Self.defaults.routing.maxWait.inSeconds

    // Unconditional: `-1` is a value (refused as such), not a flag.
    @Option(
        parsing: .unconditional,
        help: "Seconds a failed job is kept at least (its own retention if longer), for a bulk retry or delete.")
    var failedRetention: Double = Self.defaults.routing.failedRetention.inSeconds

    @Option(
        parsing: .unconditional,
        help: "Seconds a request may wait while no connected worker serves its service, before noWorkers.")
    var noWorkersGrace: Double = Self.defaults.routing.noWorkersGrace.inSeconds

    @Option(
        parsing: .unconditional,
        help: """
            Seconds a task may run past its deadline before it is answered deadlineExceeded and cancelled on its \
            worker (a job's attempt is cancelled at its timeout; this is then how long its worker has to answer \
            the cancel before it is told again).
            """)
    var leaseGrace: Double = Self.defaults.routing.leaseGrace.inSeconds

    @Option(
        help: ArgumentHelp(
            """
            A service's rate limit, SERVICE=RATE[:BURST] (images.resize=100/s:20; RATE a count per s, m, h or d; \
            BURST by default a second's worth); repeat for more services. A limit set with skyctl limits set \
            replaces it for its service until removed (docs/operations.md, "Rate limits").
            """, valueName: "service=rate[:burst]"))
    var rateLimit: [String] = []

    @Option(
        help: ArgumentHelp(
            """
            A service's rate limit per key, SERVICE=RATE[:BURST][@FIELD] (geocode=10/s:5@customer): each \
            key of its work (its concurrency key, or for work without one the payload's top-level FIELD) \
            has a bucket of its own; repeat for more services. skyctl limits set --per-key replaces it \
            until removed (docs/operations.md, "Rate limits").
            """, valueName: "service=rate[:burst][@field]"))
    var keyRateLimit: [String] = []

    @Flag(help: "Publish task.dispatched and task.completed for every task (costs throughput).")
    var taskEvents = false

    @Option(parsing: .unconditional, help: "Most frames a message may have; more are dropped and counted.")
    var maxFrames = Self.defaults.maxFramesPerMessage

    @Option(help: "The broker's secret key file (skybroker keygen); turns CURVE on for every socket.")
    var secretKey: String?

    @Option(help: "Client public keys allowed (a directory of .pub files, or a file of keys).")
    var clientKeys: String?

    @Option(help: "Worker public keys allowed (a directory of .pub files, or a file of keys).")
    var workerKeys: String?

    @Option(help: "Watcher (skywatch) public keys allowed on the events socket.")
    var watcherKeys: String?

    @Option(
        help: """
            Directory of the durable-job journal (jobs.sqlite) and its lock; made if missing. "none" runs without \
            durable jobs. Default: $XDG_STATE_HOME/sky, else ~/.local/state/sky (not the working directory).
            """)
    var stateDir: String?

    @Option(
        help: ArgumentHelp(
            """
            Keep the durable jobs on a PostgreSQL server instead of in --state-dir: a libpq connection URI, several \
            hosts allowed (postgresql://sky@db1:5432,db2:5432/sky?target_session_attrs=read-write); the password in \
            PGPASSWORD or ~/.pgpass. The broker creates its tables. Of several brokers on one store one is active; the others \
            bind nothing and wait as standbys (docs/operations.md, "High availability").
            """, valueName: "postgresql://…"))
    var store: String?

    /// Optional, so that giving it without --store is refused; its default is in the help.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            """
            With --store: seconds within which a standby takes over from an active broker that stopped renewing its \
            lease (dead, frozen, cut off from the store): after 3/5 of them it ends that broker's session; a dead \
            broker's store is free at once. The active broker's value counts. It also bounds the active broker's waits \
            on a silent store: 2/5 of it (1 s at least) per statement or connection attempt; past that, cut off with \
            a standby waiting, it serves calls until the standby listens, then steps down. \
            (default: \
            \(Self.defaults.takeoverAfter.inSeconds))
            """, valueName: "seconds"))
    var takeoverAfter: Double?

    @Option(
        parsing: .unconditional, help: "Journal bytes beyond which new jobs are refused as overloaded; 0 for no limit.")
    var journalMaxBytes = Self.defaults.journalMaxBytes

    /// Where the journal is kept without --state-dir: from this process's environment.
    private static var defaultStateDirectory: String? {
        BrokerConfiguration.defaultStateDirectory(environment: ProcessInfo.processInfo.environment)
    }

    @OptionGroup var metricsOptions: MetricsOptions

    @OptionGroup var traceLogOptions: TraceLogOptions

    @OptionGroup var common: CommonOptions

    /// The `--rate-limit` flags (`perKey` false) or the `--key-rate-limit` flags, by service;
    /// the first problem found is thrown.
    func rateLimits(perKey: Bool = false) throws -> [String: RateLimit] {
        let flag = perKey ? "--key-rate-limit" : "--rate-limit"
        let shape =
            perKey
            ? "SERVICE=RATE[:BURST][@FIELD], as geocode=10/s:5@customer"
            : "SERVICE=RATE[:BURST], as images.resize=100/s:20"
        var limits: [String: RateLimit] = [:]
        for text in perKey ? keyRateLimit : rateLimit {
            guard let equals = text.firstIndex(of: "=") else {
                throw ValidationError("\(flag) \(text) gives no rate: give \(shape)")
            }
            let service = String(text[..<equals])
            if let problem = WireFormat.nameProblem(service, what: "\(flag)'s service name") {
                throw ValidationError(problem)
            }
            if service.hasPrefix(BrokerService.prefix) {
                throw ValidationError(
                    "\(flag) \(text): \(service) is one of the broker's own services; they cannot be limited")
            }
            var value = text[text.index(after: equals)...]
            var key: KeyScope?
            if perKey {
                let at = value.firstIndex(of: "@")
                let field = at.map { String(value[value.index(after: $0)...]) }
                // A field that ends in ":" and digits is far more often a burst put after it
                // than a payload field of that name (which `skyctl limits set` still takes).
                if let field, let colon = field.lastIndex(of: ":"),
                    field[field.index(after: colon)...].allSatisfy(\.isNumber),
                    colon < field.index(before: field.endIndex)
                {
                    throw ValidationError(
                        "\(flag) \(text): the burst goes before @FIELD: give \(shape) (a field named \(field) can be set with skyctl limits set --key-field)"
                    )
                }
                key = KeyScope(field: field)
                if let at { value = value[..<at] }
            }
            let parts = value.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard let perSecond = RateLimit.parseRate(String(parts[0])) else {
                // A limit per key given to the flag for a whole service's.
                let perKeyHint =
                    !perKey && parts[0].contains("@")
                    ? " (a limit for each key of a payload field is --key-rate-limit SERVICE=RATE[:BURST]@FIELD)" : ""
                throw ValidationError(
                    "\(flag) \(text): \(parts[0]) is not a rate: give a count per s, m, h or d, as 100/s\(perKeyHint)")
            }
            var burst = RateLimit.defaultBurst(perSecond)
            if parts.count == 2 {
                guard let given = Int(parts[1]) else {
                    throw ValidationError("\(flag) \(text): the burst \"\(parts[1])\" is not a whole number of starts")
                }
                burst = given
            }
            let limit = RateLimit(perSecond: perSecond, burst: burst, key: key)
            if let problem = limit.problem { throw ValidationError("\(flag) \(text): \(problem)") }
            guard limits.updateValue(limit, forKey: service) == nil else {
                throw ValidationError("\(flag) names \(service) twice: give one limit a service")
            }
        }
        return limits
    }

    func validate() throws {
        try FlagCheck.endpoint(clients, "--clients", binding: true)
        try FlagCheck.endpoint(workers, "--workers", binding: true)
        try FlagCheck.endpoint(events, "--events", binding: true)
        var bound = [("--clients", clients), ("--workers", workers), ("--events", events)]
        if let metrics = metricsOptions.boundEndpoint { bound.append(("--metrics", metrics)) }
        try FlagCheck.distinctEndpoints(bound)
        try FlagCheck.integer(
            maxFrameSize, "--max-frame-size", in: Int64(BrokerFeatures.smallestFrameLimit)...(1 << 31))
        try FlagCheck.seconds(heartbeatInterval, "--heartbeat-interval", in: 0.01...3600)
        try FlagCheck.integer(liveness, "--liveness", in: 1...1000)
        try FlagCheck.integer(maxDeliveries, "--max-deliveries", in: 1...1000)
        try FlagCheck.integer(queueLimit, "--queue-limit", in: 0...100_000_000)
        try FlagCheck.integer(queueBytes, "--queue-bytes", in: 0...(1 << 40))
        try FlagCheck.number(clientQueueShare, "--client-queue-share", in: 0.01...1)
        try FlagCheck.seconds(maxWait, "--max-wait", in: 0.001...31_536_000)
        try FlagCheck.seconds(noWorkersGrace, "--no-workers-grace", in: 0...86_400)
        try FlagCheck.seconds(failedRetention, "--failed-retention", in: 0...315_360_000)
        try FlagCheck.seconds(leaseGrace, "--lease-grace", in: 0...86_400)
        // A request has 6 frames; a READY of 1,024 services has 1,028 whatever this says.
        try FlagCheck.integer(maxFrames, "--max-frames", in: 6...100_000)
        try FlagCheck.integer(journalMaxBytes, "--journal-max-bytes", in: 0...(1 << 50))
        if let takeoverAfter {
            try FlagCheck.seconds(takeoverAfter, "--takeover-after", in: 0.5...3600)
            guard store != nil else {
                throw ValidationError(
                    "--takeover-after applies to brokers that share a --store (PostgreSQL); this broker keeps its jobs in its state directory"
                )
            }
        }
        if stateDir?.isEmpty == true {
            throw ValidationError("--state-dir needs a directory (or \"none\" to run without durable jobs)")
        }
        if let store {
            guard !store.isEmpty else {
                throw ValidationError("--store needs a PostgreSQL URI: postgresql://user@host:5432/database")
            }
            guard store.hasPrefix("postgresql://") || store.hasPrefix("postgres://") else {
                throw ValidationError(
                    "--store \(PostgresJobStore.redacted(store)) is not a PostgreSQL URI: give postgresql://user@host:5432/database"
                )
            }
            // libpq ends the user-info at the first `@`: a password holding one made the rest
            // of it a host name ("could not translate host name").
            let authority = store.drop { $0 != "/" }.dropFirst(2).prefix { $0 != "/" && $0 != "?" }
            if authority.filter({ $0 == "@" }).count > 1 {
                throw ValidationError(
                    "--store \(PostgresJobStore.redacted(store)) has more than one @ before its host: write an @ in the user or password as %40 (or keep the password in PGPASSWORD or ~/.pgpass)"
                )
            }
            if stateDir != nil {
                throw ValidationError(
                    "--store and --state-dir both say where the jobs are kept: give one (with --store, nothing is kept in a state directory)"
                )
            }
        } else if stateDir == nil && Self.defaultStateDirectory == nil {
            throw ValidationError(
                "no --state-dir, and neither XDG_STATE_HOME nor HOME is set to an absolute path to find the default in; give --state-dir DIR (or none)"
            )
        }
        _ = try rateLimits()
        _ = try rateLimits(perKey: true)
        if secretKey == nil && [clientKeys, workerKeys, watcherKeys].contains(where: { $0 != nil }) {
            throw ValidationError("allow-lists need --secret-key: without it the broker runs without CURVE")
        }
    }

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skybroker", options: common)
        // A file-size limit (ulimit -f) must fail the journal's write (EFBIG, as a full disk
        // does), not kill the broker with SIGXFSZ: submits then fail and scans go on. Set here,
        // by the executable: a library does not change how its host process takes signals.
        signal(SIGXFSZ, SIG_IGN)
        // Large request bodies go back to the system once answered (the allocator's setting is
        // the process's, so the executable makes it).
        BrokerProcessSettings.apply()
        if let raised = ProcessSetup.raiseOpenFilesLimit() {
            logger.info(
                "raised the open files limit to the hard limit",
                metadata: ["from": "\(raised.from)", "to": "\(raised.to)"])
        }
        var routing = BrokerStateMachine.Configuration()
        routing.heartbeatInterval = FlagCheck.duration(seconds: heartbeatInterval)
        routing.liveness = liveness
        routing.maxDeliveries = maxDeliveries
        routing.queueLimit = queueLimit
        routing.queueBytesLimit = queueBytes
        routing.clientQueueShare = clientQueueShare
        routing.maxWait = FlagCheck.duration(seconds: maxWait)
        routing.noWorkersGrace = FlagCheck.duration(seconds: noWorkersGrace)
        routing.failedRetention = FlagCheck.duration(seconds: failedRetention)
        routing.leaseGrace = FlagCheck.duration(seconds: leaseGrace)
        routing.taskEvents = taskEvents
        routing.rateLimits = try rateLimits()
        routing.keyRateLimits = try rateLimits(perKey: true)
        var configuration = BrokerConfiguration(
            clientsEndpoint: clients, workersEndpoint: workers, eventsEndpoint: events, maxFrameSize: maxFrameSize,
            routing: routing)
        configuration.maxFramesPerMessage = maxFrames
        if let store {
            configuration.store = store
            if let takeoverAfter { configuration.takeoverAfter = FlagCheck.duration(seconds: takeoverAfter) }
        } else {
            let directory = stateDir ?? Self.defaultStateDirectory
            configuration.stateDirectory = directory == "none" ? nil : directory
        }
        configuration.journalMaxBytes = journalMaxBytes
        if let secretKey {
            do {
                var lists: [BrokerSecurity.Role: String] = [:]
                lists[.client] = clientKeys
                lists[.worker] = workerKeys
                lists[.watcher] = watcherKeys
                configuration.security = BrokerSecurity(keys: try CurveKeyFile.readSecret(secretKey), allowLists: lists)
            } catch {
                ProcessSetup.fail("skybroker", "\(error)")
            }
        }
        let metricsURL = await metricsOptions.start(program: "skybroker")
        let traceLog = traceLogOptions.start(program: "skybroker")
        defer { traceLog?.flush() }
        await ProcessSetup.serveUntilSignalled(
            StartingBroker(configuration: configuration, metricsURL: metricsURL, logger: logger), program: "skybroker",
            logger: logger)
    }
}
