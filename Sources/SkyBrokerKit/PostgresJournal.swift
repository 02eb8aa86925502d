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
    let lost: AsyncStream<JournalError>?
    let epoch: Int64?
    /// Renews the lease between transactions, and steps down when it could not be renewed for
    /// long while a standby waits.
    private let renewal: Task<Void, Never>
    private let watchdog: Task<Void, Never>
    let stallGuard: (@Sendable (Duration) -> Bool)?

    /// When the lease was last renewed (by a transaction or a renewal), and how many standbys
    /// the last renewal found waiting.
    struct LeaseWatch: Sendable {
        var renewedAt = ContinuousClock.now
        var standbys = 0
    }

    private init(
        writer: JournalWriter, unfinished: [JobRecord], epoch: Int64, standby: PostgresJobStore.Standby,
        store: String, watch: Locked<LeaseWatch>,
        lost: (stream: AsyncStream<JournalError>, continuation: AsyncStream<JournalError>.Continuation),
        logger: Logger
    ) {
        self.writer = writer
        self.unfinished = unfinished
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
                    let standbys = try? await writer.read({ store throws(JournalError) in
                        try (store as? PostgresJobStore)?.renewLease()
                    })
                else { continue }
                let before = watch.withLock { watch in
                    defer { watch.standbys = standbys }
                    return watch.standbys
                }
                if before != standbys {
                    logger.info("standby brokers waiting to take over", metadata: ["standbys": "\(standbys)"])
                }
            }
        }
        // Cut off from the store (or with the store hanging) while a standby waits, the broker
        // steps down before the standby takes over (at the lease's lapse), so that workers and
        // clients move to it; alone, it goes on serving calls. The same after a pause of its
        // I/O thread that long, seen by that thread when it wakes (``StallGuard``).
        let stepDownAfter = standby.stepDownAfter
        let stepsDown: @Sendable (Duration) -> Bool = { silence in
            guard silence > stepDownAfter, watch.withLock({ $0.standbys }) > 0 else { return false }
            lost.continuation.yield(.leaseLapsed(store: store, seconds: Int(silence.components.seconds)))
            lost.continuation.finish()
            return true
        }
        stallGuard = stepsDown
        watchdog = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: standby.renewEvery / 2)
                if stepsDown(watch.withLock { $0.renewedAt.duration(to: .now) }) { return }
            }
        }
    }

    /// Connects and waits, as a standby, until this broker is the active one; then creates,
    /// migrates or checks the schema and reads what is unfinished.
    /// - Parameter name: how this broker names itself to standbys and operators.
    /// - Throws: ``BrokerStartError`` naming the store (without its password) and what to do.
    static func open(_ uri: String, name: String, takeoverAfter: Duration, logger: Logger) async throws
        -> PostgresJournal
    {
        let store = PostgresJobStore.redacted(uri)
        let (lost, losing) = AsyncStream.makeStream(of: JournalError.self, bufferingPolicy: .bufferingNewest(1))
        let standby = PostgresJobStore.Standby(
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
        let watch = Locked(LeaseWatch())
        do {
            let (writer, unfinished) = try await JournalWriter.startReading(named: ("store", store), logger: logger) {
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
                writer: writer, unfinished: unfinished, epoch: epoch, standby: standby, store: store, watch: watch,
                lost: (lost, losing), logger: logger)
        } catch {
            throw BrokerStartError(role: "journal", endpoint: store, reason: "\(error)")
        }
    }

    func announce(_ name: String) async {
        _ = try? await writer.read { store throws(JournalError) in try (store as? PostgresJobStore)?.rename(name) }
    }

    /// How a broker names itself in the store's lease: what standbys log of the active one.
    static func name(clients: String) -> String {
        "\(ProcessInfo.processInfo.hostName) pid \(getpid()) clients \(clients)"
    }

    func close() async {
        renewal.cancel()
        watchdog.cancel()
        await writer.stop()
    }
}
