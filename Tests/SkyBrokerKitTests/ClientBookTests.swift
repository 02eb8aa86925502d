import Testing

@testable import SkyBrokerKit

/// The broker's clients by number: a routing id keeps its number while the client is known,
/// a freed number goes to the next new client, and the jobs' number stays apart.
@Suite("Client book")
struct ClientBookTests {
    @Test func aPeerKeepsItsNumberAndAFreedNumberGoesToTheNextNewClient() throws {
        var book = ClientBook()
        let a = book.number(for: PeerID([1]))
        let b = book.number(for: PeerID([2]))
        #expect(a != b)
        #expect(book.number(for: PeerID([1])) == a)
        #expect(book.number(of: PeerID([2])) == b)
        #expect(book.record(a)?.peer == PeerID([1]))
        book.update(a) { $0.outstanding += 2 }
        #expect(book.record(a)?.outstanding == 2, "changed in place")
        book.remove(a)
        #expect(book.record(a) == nil)
        #expect(book.update(a) { $0.outstanding += 1 } == nil, "a free number changes nothing")
        #expect(book.number(of: PeerID([1])) == nil)
        #expect(book.count == 1)
        let c = book.number(for: PeerID([3]))
        #expect(c == a, "the freed number")
        #expect(book.record(c)?.peer == PeerID([3]) && book.record(c)?.outstanding == 0, "a new record")
    }

    /// The client found last is found again without hashing, but only while its number is
    /// still its own: freed, or given to another client, the number is not the old id's.
    @Test func theLastClientFoundIsNeverFoundUnderAnotherClientsNumber() {
        var book = ClientBook()
        let a = book.number(for: PeerID([1]))
        #expect(book.number(for: PeerID([1])) == a, "found again")
        book.remove(a)
        let b = book.number(for: PeerID([2]))
        #expect(b == a, "the freed number")
        let again = book.number(for: PeerID([1]))
        #expect(again != b, "a new number, not the other client's")
        #expect(book.record(again)?.peer == PeerID([1]) && book.record(b)?.peer == PeerID([2]))
        #expect(book.number(for: PeerID([2])) == b && book.number(for: PeerID([1])) == again)
    }

    @Test func theJobsNumberIsApartAndNeverFreed() {
        var book = ClientBook()
        #expect(book.record(ClientBook.jobs) == nil)
        book.addJobDelivery()
        #expect(book.count == 1)
        #expect(book.record(ClientBook.jobs)?.outstanding == 2, "one for the delivery, one its own")
        book.remove(ClientBook.jobs)
        #expect(book.record(ClientBook.jobs)?.outstanding == 2)
        #expect(book.number(for: PeerID([9])) == 0, "the array starts at 0")
        #expect(book.record(12345) == nil, "a number never given is nobody's")
    }

    @Test func shrinkingKeepsTheClientsAndEmptiesTheArrayOnceNobodyIsLeft() {
        var book = ClientBook()
        let a = book.number(for: PeerID([1]))
        _ = book.number(for: PeerID([2]))
        book.shrink()
        #expect(book.number(of: PeerID([1])) == a && book.count == 2)
        book.remove(a)
        book.remove(book.number(of: PeerID([2]))!)
        book.shrink()
        #expect(book.isEmpty)
        #expect(book.number(for: PeerID([3])) == 0)
    }
}
