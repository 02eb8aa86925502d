import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Broker state machine: cancelling jobs whose start is being prepared")
struct BrokerJobCancelTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    /// A free credit waits for a better job whose start is being written rather than take a
    /// worse prepared one. Once that better job is cancelled, the credit takes the prepared one
    /// at once: the cancelled job is finishing before the service's prepared jobs are offered.
    /// (Offered while it still counted as being prepared, the credit waited another commit.)
    @Test func aCreditHeldForABetterJobTakesAnotherOnceThatOneIsCancelled() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.commit(broker.ready(worker1, capacity: 1))
        let (busy, sent) = broker.submit(client, RequestID(high: 1, low: 1))
        #expect(dispatched(sent).map(\.1) == [busy.requestID], "the worker is busy with it")
        let (better, _) = broker.submit(client, RequestID(high: 1, low: 2), priority: 10) {
            $0.delayMilliseconds = 1000
        }
        _ = broker.submit(client, RequestID(high: 1, low: 3)) { $0.delayMilliseconds = 1000 }
        let (waiting, _) = broker.submit(client, RequestID(high: 1, low: 4))

        // Both delayed jobs come due: their starts are being written.
        let due = broker.advance(.seconds(1))
        #expect(journalWrites(due).count == 2)
        // The credit frees up, and waits for the better job being prepared.
        let freed = broker.reply(worker1, client: client, busy.requestID)
        #expect(dispatched(freed).isEmpty)

        let cancel = RequestID(high: 2, low: 1)
        let cancelled = broker.ask(client, cancel, BrokerService.jobCancel, better)
        #expect(dispatched(cancelled).map(\.1) == [waiting.requestID])
        let answered = broker.commit(cancelled)
        #expect(reports(answered, to: cancel).map(\.state) == [.cancelled])
        #expect(reports(answered, to: cancel).map(\.attempt) == [0], "it never ran")
    }
}
