import Logging
import SkyJournal
import SkyPostgres

/// The journal on a PostgreSQL server (`skybroker --store`): its lock is the store's own (a
/// session advisory lock, see `PostgresJobStore`), so nothing is kept on the broker's disk.
final class PostgresJournal: OpenedJournal {
    let writer: JournalWriter
    let unfinished: [JobRecord]
    let lost: AsyncStream<JournalError>?

    private init(writer: JournalWriter, unfinished: [JobRecord], lost: AsyncStream<JournalError>) {
        self.writer = writer
        self.unfinished = unfinished
        self.lost = lost
    }

    /// Connects, takes the store's lock, creates or checks its schema, and reads what is
    /// unfinished.
    /// - Throws: ``BrokerStartError`` naming the store (without its password) and what to do.
    static func open(_ uri: String, logger: Logger) async throws -> PostgresJournal {
        let store = PostgresJobStore.redacted(uri)
        let (lost, losing) = AsyncStream.makeStream(of: JournalError.self, bufferingPolicy: .bufferingNewest(1))
        do {
            let (writer, unfinished) = try await JournalWriter.startReading(named: ("store", store), logger: logger) {
                () throws(JournalError) in
                try PostgresJobStore(uri: uri) { error in
                    losing.yield(error)
                    losing.finish()
                }
            }
            return PostgresJournal(writer: writer, unfinished: unfinished, lost: lost)
        } catch {
            throw BrokerStartError(role: "journal", endpoint: store, reason: "\(error)")
        }
    }

    func close() async {
        await writer.stop()
    }
}
