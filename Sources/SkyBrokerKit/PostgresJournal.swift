import Foundation
import Logging
import SkyJournal
import SkyPostgres
import SkyZMQ

/// The journal on a PostgreSQL server (`skybroker --store`): its lock and lease are the store's
/// own (see `PostgresJobStore`), so nothing is kept on the broker's disk. Opening it waits as a
/// standby while another broker is active.
final class PostgresJournal: OpenedJournal {
    let writer: JournalWriter
    let unfinished: [JobRecord]
    let settings: JournalSettings
    let lost: AsyncStream<JournalError>?
    let epoch: Int64?
    /// Renews the lease between transactions, and steps down once a standby took over while
    /// the store was out of reach.
    private let renewal: Task<Void, Never>
    private let watchdog: Task<Void, Never>
    let stallGuard: (@Sendable (Duration) -> Bool)?
    let storeAnswers: (@Sendable () -> Bool)?

    /// When the lease was last renewed (by a transaction or a renewal), and the standbys the
    /// last renewal found waiting.
    struct LeaseWatch: Sendable {
        var renewedAt = ContinuousClock.now
        var standbys: [WaitingStandby] = []
        /// The broker stepped down (once, whichever way saw it first).
        var steppedDown = false
    }

    /// A standby as the active broker knows it: its name in the store, and how to ask whether
    /// it now listens on its clients endpoint (it binds once it has taken over).
    struct WaitingStandby: Sendable, Equatable {
        var name: String
        /// `nil`: its endpoint cannot be asked (``ListenerProbe``), so its takeover cannot be
        /// seen without the store.
        var probe: ListenerProbe?

        /// - Parameter own: this broker's name: a standby named with the same host and
        ///   endpoint cannot listen beside it, so it is another host of the same name (containers)
        ///   whose endpoint would be asked here, at this broker itself; it is not asked.
        init(name: String, own: String) {
            self.name = name
            let localHost = ProcessInfo.processInfo.hostName
            probe = PostgresJournal.endpoint(in: name).flatMap { host, endpoint in
                if let mine = PostgresJournal.endpoint(in: own), mine.host == host, mine.endpoint == endpoint {
                    return nil
                }
                return ListenerProbe(endpoint: endpoint, host: host, localHost: localHost)
            }
        }
    }

    private init(
        writer: JournalWriter, unfinished: [JobRecord], settings: JournalSettings, epoch: Int64,
        standby: PostgresJobStore.Standby,
        store: String, watch: Locked<LeaseWatch>,
        lost: (stream: AsyncStream<JournalError>, continuation: AsyncStream<JournalError>.Continuation),
        logger: Logger
    ) {
        self.writer = writer
        self.unfinished = unfinished
        self.settings = settings
        self.lost = lost.stream
        self.epoch = epoch
        // The watch counts from when this broker became active, not from when it began to wait.
        watch.withLock { $0.renewedAt = .now }
        renewal = Task { [writer] in
            while !Task.isCancelled {
                try? await Task.sleep(for: standby.renewEvery)
                // A store out of reach fails the journal's writes too, which say so; a newer
                // epoch is reported through `lost`.
                guard
                    let names = try? await writer.read({ store throws(JournalError) in
                        try (store as? PostgresJobStore)?.renewLease()
                    })
                else { continue }
                guard names != watch.withLock({ $0.standbys.map(\.name) }) else { continue }
                // Resolved here, while the store (and most likely the name service) answers.
                let standbys = await Self.blocking { names.map { WaitingStandby(name: $0, own: standby.name) } }
                watch.withLock { $0.standbys = standbys }
                logger.info("standby brokers waiting to take over", metadata: ["standbys": "\(standbys.count)"])
                for standby in standbys where standby.probe == nil {
                    logger.notice(
                        "a standby's clients endpoint cannot be asked whether it took over (an interface name, or a host name this host does not resolve): cut off from the job store, this broker will step down before its lease lapses, whether or not the standby can take over. Give that standby an address or a host name this host resolves",
                        metadata: ["standby": "\(standby.name)"])
                }
            }
        }
        // Once, whichever way below sees it first: the other says nothing more.
        let stepDown: @Sendable (JournalError) -> Void = { error in
            let first = watch.withLock { watch in
                defer { watch.steppedDown = true }
                return !watch.steppedDown
            }
            guard first else { return }
            lost.continuation.yield(error)
            lost.continuation.finish()
        }
        // Paused that long (seen by its I/O thread when it wakes, ``StallGuard``) while a
        // standby waits, the broker steps down: a standby may have taken over meanwhile, and a
        // woken broker must not expire its workers before it knows.
        let stepDownAfter = standby.stepDownAfter
        // A renewal is due every `renewEvery`: one and a half of them without an answer, and the
        // store is not answering (well before a standby may take over, at the lapse).
        let answersWithin = standby.renewEvery * 3 / 2
        storeAnswers = { watch.withLock { $0.renewedAt.duration(to: .now) } <= answersWithin }
        stallGuard = { silence in
            // Stepped down already (the watchdog below may wake first): nothing more is served.
            let (steppedDown, waiting) = watch.withLock { ($0.steppedDown, !$0.standbys.isEmpty) }
            if steppedDown { return true }
            guard silence > stepDownAfter, waiting else { return false }
            stepDown(.leaseLapsed(store: store, seconds: Int(silence.components.seconds)))
            return true
        }
        // Cut off from the store (or with the store hanging) while a standby waits, the broker
        // goes on serving calls and asks the standbys' clients endpoints until one listens: a
        // standby binds only once it has taken over, so the broker then steps down and its
        // workers and clients move. When the store is out of reach for everyone (a restart, a
        // hung server), no standby can take over, and the broker goes on serving. A standby
        // whose endpoint cannot be asked leaves only the old way: step down at the silence's
        // bound, before the lapse.
        watchdog = Task {
            var watching = false
            while !Task.isCancelled {
                let interval = watching ? Self.probeEvery : standby.renewEvery / 2
                let asleep = ContinuousClock.now
                try? await Task.sleep(for: interval)
                let (silence, standbys, steppedDown) = watch.withLock {
                    ($0.renewedAt.duration(to: .now), $0.standbys, $0.steppedDown)
                }
                if steppedDown { return }
                // Woken that late, the process was paused: as the I/O thread's guard does.
                if asleep.duration(to: .now) > interval + stepDownAfter, !standbys.isEmpty {
                    stepDown(.leaseLapsed(store: store, seconds: Int(silence.components.seconds)))
                    return
                }
                guard silence > stepDownAfter, !standbys.isEmpty else {
                    if watching {
                        logger.notice("the job store answers again; this broker is still the active one")
                    }
                    watching = false
                    continue
                }
                if standbys.contains(where: { $0.probe == nil }) {
                    stepDown(.leaseLapsed(store: store, seconds: Int(silence.components.seconds)))
                    return
                }
                if !watching {
                    watching = true
                    logger.warning(
                        "cut off from the job store while a standby waits: serving calls until a standby takes over",
                        metadata: ["silent for": "\(silence)", "standbys": "\(standbys.map(\.name))"])
                }
                let listening = await Self.blocking {
                    standbys.first { $0.probe?.isListening(within: Self.probeEvery) == true }
                }
                if let active = listening {
                    logger.warning(
                        "a standby took over while this broker was cut off from the job store",
                        metadata: ["standby": "\(active.name)", "silent for": "\(silence)"])
                    stepDown(.fenced(store: store))
                    return
                }
            }
        }
    }

    /// How often an active broker cut off from the store asks whether a standby took over.
    static let probeEvery = Duration.milliseconds(100)

    /// Where the watch's blocking calls run (a name lookup, a connect waited for up to
    /// ``probeEvery``): a thread of their own, not one of the cooperative pool's two here.
    private static let blockingQueue = DispatchQueue(label: "sky-standby-probe")

    private static func blocking<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            blockingQueue.async { continuation.resume(returning: work()) }
        }
    }

    /// Connects and waits, as a standby, until this broker is the active one; then creates,
    /// migrates or checks the schema and reads what is unfinished.
    /// - Parameter name: how this broker names itself to standbys and operators.
    /// - Throws: ``BrokerStartError`` naming the store (without its password) and what to do.
    /// - Parameter endpoints: where peers find this broker (clients, workers, events): one
    ///   whose port is the kernel's pick could not be found once it took over, so such a broker
    ///   does not wait as a standby.
    /// - Parameter stop: asked at every poll of the wait; `true` ends it (``BrokerStoppedWaiting``).
    static func open(
        _ uri: String, name: String, endpoints: [String], takeoverAfter: Duration,
        stop: @escaping @Sendable () -> Bool = { false }, logger: Logger
    ) async throws -> PostgresJournal {
        let store = PostgresJobStore.redacted(uri)
        let unfindable = endpoints.filter { $0.hasSuffix(":*") || $0.hasSuffix(":!") || $0 == "ipc://*" }
        let (lost, losing) = AsyncStream.makeStream(of: JournalError.self, bufferingPolicy: .bufferingNewest(1))
        var waiting = PostgresJobStore.Standby(
            name: name, takeoverAfter: takeoverAfter,
            waiting: { lease in
                logger.notice(
                    "standby: another broker is active on the job store; waiting to take over",
                    metadata: [
                        "store": "\(store)", "active": "\(lease.holder.isEmpty ? "(unnamed)" : lease.holder)",
                        "epoch": "\(lease.epoch)",
                    ])
            },
            evicted: { lease, ended in
                if ended {
                    logger.warning(
                        "the active broker stopped renewing its lease: told its session to end, to take over (its lock is free once it has)",
                        metadata: [
                            "active": "\(lease.holder)", "epoch": "\(lease.epoch)", "silent for": "\(lease.silence)",
                        ])
                } else {
                    logger.warning(
                        "the active broker's lease lapsed, but its session could not be ended (it has ended already, or this user may not end another's: give both brokers one database user)",
                        metadata: ["active": "\(lease.holder)", "epoch": "\(lease.epoch)"])
                }
            },
            unreachable: { error in
                logger.warning(
                    "standby: the job store cannot be reached; trying again", metadata: ["error": "\(error)"])
            })
        waiting.mayWait = unfindable.isEmpty
        waiting.stop = stop
        let standby = waiting
        let watch = Locked(LeaseWatch())
        do {
            let (writer, unfinished, settings) = try await JournalWriter.startReading(
                named: ("store", store), logger: logger
            ) {
                () throws(JournalError) in
                try PostgresJobStore(
                    uri: uri, standby: standby,
                    lost: { error in
                        losing.yield(error)
                        losing.finish()
                    },
                    renewed: { watch.withLock { $0.renewedAt = .now } })
            }
            let epoch = try await writer.read { store throws(JournalError) in
                (store as? PostgresJobStore)?.currentEpoch ?? 0
            }
            return PostgresJournal(
                writer: writer, unfinished: unfinished, settings: settings, epoch: epoch, standby: standby,
                store: store,
                watch: watch,
                lost: (lost, losing), logger: logger)
        } catch JournalError.stoppedWaiting {
            throw BrokerStoppedWaiting(store: store)
        } catch JournalError.inUse where !unfindable.isEmpty {
            throw BrokerStartError(
                role: "journal", endpoint: store,
                reason:
                    "another skybroker is active on it, so this one would wait as a standby, but it binds \(unfindable.joined(separator: ", ")), a port the kernel picks: once it took over, no client or worker would find it. Give --clients, --workers and --events fixed ports, and list every broker's in each peer's --broker (or SkyClient(brokers:))"
            )
        } catch {
            throw BrokerStartError(role: "journal", endpoint: store, reason: "\(error)")
        }
    }

    func announce(_ name: String) async {
        _ = try? await writer.read { store throws(JournalError) in try (store as? PostgresJobStore)?.rename(name) }
    }

    /// How a broker names itself in the store's lease (what standbys log of the active one) and
    /// as a standby (what the active broker asks when cut off from the store: ``endpoint(in:)``).
    static func name(clients: String) -> String {
        "\(ProcessInfo.processInfo.hostName) pid \(getpid()) clients \(clients)"
    }

    /// The host and clients endpoint in a ``name(clients:)``.
    static func endpoint(in name: String) -> (host: String, endpoint: String)? {
        guard let marker = name.range(of: " clients ", options: .backwards),
            let host = name.split(separator: " ", maxSplits: 1).first
        else { return nil }
        return (String(host), String(name[marker.upperBound...]))
    }

    func close() async {
        renewal.cancel()
        watchdog.cancel()
        await writer.stop()
    }
}
