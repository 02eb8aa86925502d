import Foundation
import Logging
import SkyJournal
import SkyPostgres

/// The journal on a PostgreSQL server (`skybroker --store`): its lock and lease are the store's
/// own (see `PostgresJobStore`), so nothing is kept on the broker's disk. Opening it waits as a
/// standby while another broker is active.
final class PostgresJournal: OpenedJournal {
    let writer: JournalWriter
    let unfinished: [JobRecord]
    let lost: AsyncStream<JournalError>?
    let epoch: Int64?
    /// Renews the lease between transactions while the broker runs.
    private let renewal: Task<Void, Never>

    private init(
        writer: JournalWriter, unfinished: [JobRecord], lost: AsyncStream<JournalError>, epoch: Int64,
        renewEvery: Duration
    ) {
        self.writer = writer
        self.unfinished = unfinished
        self.lost = lost
        self.epoch = epoch
        renewal = Task { [writer] in
            while !Task.isCancelled {
                try? await Task.sleep(for: renewEvery)
                // A store out of reach fails the journal's writes too, which say so; a newer
                // epoch is reported through `lost`.
                _ = try? await writer.read { store throws(JournalError) in
                    try (store as? PostgresJobStore)?.renewLease()
                }
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
                        "the active broker stopped renewing its lease: ended its session to take over",
                        metadata: [
                            "active": "\(lease.holder)", "epoch": "\(lease.epoch)", "silent for": "\(lease.silence)",
                        ])
                } else {
                    logger.warning(
                        "the active broker's lease lapsed, but its session could not be ended (it has ended already, or this user may not end another's: give both brokers one database user)",
                        metadata: ["active": "\(lease.holder)", "epoch": "\(lease.epoch)"])
                }
            })
        var epoch: Int64 = 0
        do {
            let (writer, unfinished) = try await JournalWriter.startReading(named: ("store", store), logger: logger) {
                () throws(JournalError) in
                try PostgresJobStore(uri: uri, standby: standby) { error in
                    losing.yield(error)
                    losing.finish()
                }
            }
            epoch = try await writer.read { store throws(JournalError) in
                (store as? PostgresJobStore)?.currentEpoch ?? 0
            }
            return PostgresJournal(
                writer: writer, unfinished: unfinished, lost: lost, epoch: epoch, renewEvery: standby.renewEvery)
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
        await writer.stop()
    }
}
