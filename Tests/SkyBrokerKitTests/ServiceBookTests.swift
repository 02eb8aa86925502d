import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The broker's services by number: one lookup of a name per request, numbers used again once
/// a service is forgotten, and never more services than the limit.
@Suite("Service book")
struct ServiceBookTests {
    @Test func aNameKeepsItsNumberAndAnotherNameGetsAnother() {
        var book = ServiceBook()
        let scan = book.number(for: "sky.scan", limit: 10)
        let echo = book.number(for: "sky.echo", limit: 10)
        #expect(scan != nil && echo != nil && scan != echo)
        #expect(book.number(for: "sky.scan", limit: 10) == scan)
        #expect(book.number(of: "sky.echo") == echo)
        #expect(book.number(of: "sky.sleep") == nil, "looking up does not make a service known")
        #expect(book.count == 2)
        #expect(book[scan!].name == "sky.scan")
    }

    /// The name found last is found again without hashing, but only while its number still
    /// names it: once forgotten and given to another service, the old name is new again.
    @Test func theLastNameFoundIsNeverFoundUnderAnotherServicesNumber() throws {
        var book = ServiceBook()
        let firstNumber = book.number(for: "first", limit: 10)
        let first = try #require(firstNumber)
        #expect(book.number(for: "first", limit: 10) == first, "found again")
        book.updateAll(keeping: { _ in false }) { _, _ in }
        #expect(!book.isKnown(first), "idle: forgotten")
        let secondNumber = book.number(for: "second", limit: 10)
        let second = try #require(secondNumber)
        #expect(second == first, "its number used again")
        let againNumber = book.number(for: "first", limit: 10)
        let again = try #require(againNumber)
        #expect(again != second, "a new number, not the one that names another service now")
        #expect(book[again].name == "first" && book[second].name == "second")
        #expect(book.number(for: "second", limit: 10) == second)
        #expect(book.number(for: "first", limit: 10) == again)
    }

    @Test func atTheLimitANewNameGetsNoNumberButAKnownOneStill() {
        var book = ServiceBook()
        #expect(book.number(for: "a", limit: 2) != nil)
        #expect(book.number(for: "b", limit: 2) != nil)
        #expect(book.number(for: "c", limit: 2) == nil)
        #expect(book.number(for: "a", limit: 2) != nil)
        #expect(book.count == 2)
    }

    /// The stats pass forgets what nobody serves, waits for or answered; the number then names
    /// the next new service, and the old one is no longer known by it.
    @Test func anIdleServiceIsForgottenAtTheStatsPassAndItsNumberUsedAgain() throws {
        var book = ServiceBook()
        let servedNumber = book.number(for: "served", limit: 10)
        let served = try #require(servedNumber)
        let waitedNumber = book.number(for: "waited", limit: 10)
        let waited = try #require(waitedNumber)
        let answeredNumber = book.number(for: "answered", limit: 10)
        let answered = try #require(answeredNumber)
        let idleNumber = book.number(for: "idle", limit: 10)
        let idle = try #require(idleNumber)
        book[served].workers.append(PeerID([1]))
        var queue = RequestQueue()
        queue.insert(
            BrokerStateMachine.QueuedRequest(
                client: 0, request: TaskRequest(requestID: RequestID(high: 0, low: 1), service: "waited", body: []),
                arrival: queue.nextArrival(priority: 0) | UInt64(waited), arrivedAt: 0),
            expiry: .max)
        book[answered].window.record { $0.recordFailure(.noWorkers) }
        book.updateAll(keeping: queue.hasEntries) { _, _ in }
        #expect(book.count == 3)
        #expect(!book.isKnown(idle))
        #expect(book.number(of: "idle") == nil)
        // The window was this period's; after the next pass without answers it is forgotten.
        book.updateAll(keeping: queue.hasEntries) { $1.window = nil }
        #expect(book.number(of: "answered") == nil)
        #expect(book.isKnown(served) && book.isKnown(waited))
        let nextNumber = book.number(for: "next", limit: 10)
        let next = try #require(nextNumber)
        #expect([idle, answered].contains(next), "a freed number is used again")
        #expect(book[next].name == "next" && book[next].workers.isEmpty && book[next].window == nil)
    }

    /// Numbers fit below the arrival number's service bits; the last one names no service.
    @Test func theLastNumberNamesNoService() {
        #expect(UInt64(ServiceBook.none) == BrokerStateMachine.slotMask)
        let book = ServiceBook()
        #expect(!book.isKnown(ServiceBook.none))
    }

    /// A waiting request's deadline entry names its service by number. Once that service is
    /// forgotten and its number given to another, the stale entry finds nothing: arrival
    /// numbers are never used twice.
    @Test func aDeadlineOfAForgottenServiceDoesNotTouchTheServiceThatTookItsNumber() {
        var broker = BrokerHarness()
        let clientA = PeerID([0xA])
        let first = PeerID([0xB])
        _ = broker.ready(first, capacity: 1, services: ["gone"])
        let busy = RequestID(high: 9, low: 1)
        let early = RequestID(high: 9, low: 2)
        _ = broker.request(clientA, busy, service: "gone")
        let number = broker.machine.services.number(of: "gone")
        // It waits, with a deadline entry 5 s ahead, then runs and is answered.
        _ = broker.request(clientA, early, service: "gone", timeout: .seconds(5))
        #expect(dispatched(broker.reply(first, client: clientA, busy)).map(\.1) == [early])
        _ = broker.reply(first, client: clientA, early)
        _ = broker.worker(first, .disconnect)
        _ = broker.advance(.seconds(1))  // the first tick starts the stats period
        _ = broker.advance(.seconds(1))
        #expect(broker.machine.services.number(of: "gone") == nil, "forgotten at the stats pass")
        // "other", served by nobody yet, takes the number; its request may wait 60 s.
        let waiting = RequestID(high: 9, low: 3)
        _ = broker.request(clientA, waiting, service: "other", noWorkersGrace: .seconds(60))
        #expect(broker.machine.services.number(of: "other") == number, "the freed number")
        // The old deadline passes: the request for "other" keeps waiting.
        #expect(replies(broker.advance(.seconds(4))).isEmpty)
        #expect(broker.machine.queuedCount == 1)
        let second = PeerID([0xC])
        #expect(dispatched(broker.ready(second, capacity: 1, services: ["other"])).map(\.1) == [waiting])
    }
}
