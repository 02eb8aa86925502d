import SkyProtocol
import Testing

@testable import SkyBrokerKit

/// The deliveries workers hold, by slot: a tag finds its delivery until it is taken, never
/// after (a slot used again has a new generation), a reply must come from the worker that
/// holds the delivery and name its request, and a worker that leaves gives back exactly its own.
@Suite("Delivery book")
struct DeliveryBookTests {
    let worker1 = PeerID([1])
    let worker2 = PeerID([2])

    func held(_ low: UInt64) -> DeliveryBook.Held {
        BrokerStateMachine.InFlightTask(
            task: BrokerStateMachine.QueuedRequest(
                client: 0, request: TaskRequest(requestID: RequestID(high: 0, low: low), service: "s", body: []),
                arrival: low, arrivedAt: 0))
    }

    func id(_ low: UInt64) -> RequestID { RequestID(high: 0, low: low) }

    @Test func aTagFindsItsDeliveryUntilItIsTakenAndNeverAfter() throws {
        var book = DeliveryBook()
        let anchor = book.addWorker(worker1)
        let tag = book.insert(held(1), worker: worker1, anchor: anchor)
        #expect(tag != 0, "tag 0 names nothing")
        #expect(book[tag]?.task.request.requestID == id(1))
        #expect(book.worker(of: tag) == worker1)
        #expect(book.count == 1)
        #expect(book.take(tag, heldBy: worker1, requestID: id(1))?.task.arrival == 1)
        #expect(book[tag] == nil && book.worker(of: tag) == nil && book.count == 0)
        #expect(book.take(tag, heldBy: worker1, requestID: id(1)) == nil, "taken once")
        // The slot is used again, under a new tag: the old one still names nothing.
        let again = book.insert(held(2), worker: worker1, anchor: anchor)
        #expect(again >> DeliveryBook.generationBits == tag >> DeliveryBook.generationBits, "the same slot")
        #expect(again != tag)
        #expect(book[tag] == nil)
        #expect(book.take(tag, heldBy: worker1, requestID: id(2)) == nil, "a late reply to the slot's last delivery")
        #expect(book[again]?.task.request.requestID == id(2))
        #expect(book[anchor == 0 ? 1 : 0] == nil, "an anchor's slot is no delivery")
        #expect(book[UInt64(1000) << DeliveryBook.generationBits | 1] == nil, "a slot beyond the book")
        #expect(book[UInt64.max] == nil && book[tag | 1 << 63] == nil, "bits beyond a tag's")
        #expect(again >> DeliveryBook.tagBits == 0, "a tag fits in 44 bits")
    }

    @Test func aReplyMustComeFromTheHolderAndNameItsRequest() {
        var book = DeliveryBook()
        let anchor1 = book.addWorker(worker1)
        _ = book.addWorker(worker2)
        let tag = book.insert(held(7), worker: worker1, anchor: anchor1)
        #expect(book.take(tag, heldBy: worker2, requestID: id(7)) == nil, "another worker's reply")
        #expect(book.take(tag, heldBy: worker1, requestID: id(8)) == nil, "another request's reply")
        #expect(book[tag] != nil, "still held")
        let arrival = book.update(tag) { held in
            held.answered = true
            return held.task.arrival
        }
        #expect(arrival == 7)
        #expect(book[tag]?.answered == true, "changed in place")
        #expect(book.take(tag, heldBy: worker1, requestID: id(7))?.answered == true)
    }

    @Test func aWorkerThatLeavesGivesBackExactlyItsOwnDeliveries() {
        var book = DeliveryBook()
        let anchor1 = book.addWorker(worker1)
        let anchor2 = book.addWorker(worker2)
        var tags1: [UInt64] = []
        for n in 1...5 {
            tags1.append(book.insert(held(UInt64(n)), worker: worker1, anchor: anchor1))
            _ = book.insert(held(UInt64(100 + n)), worker: worker2, anchor: anchor2)
        }
        // Taken from the middle, the front and the back of worker1's ring.
        for index in [2, 0, 4] {
            #expect(book.take(tags1[index], heldBy: worker1, requestID: id(UInt64(index + 1))) != nil)
        }
        #expect(Set(book.held(anchor: anchor1).map(\.tag)) == [tags1[1], tags1[3]])
        let lost = book.removeWorker(anchor: anchor1)
        #expect(Set(lost.map(\.held.task.arrival)) == [2, 4])
        #expect(Set(lost.map(\.tag)) == [tags1[1], tags1[3]])
        #expect(book.count == 5, "worker2's stay")
        #expect(Set(book.held(anchor: anchor2).map(\.held.task.arrival)) == Set(101...105))
        #expect(tags1.allSatisfy { book[$0] == nil })
        // Its slots are used again by a new worker, which holds only its own.
        let anchor3 = book.addWorker(worker1)
        let tag = book.insert(held(9), worker: worker1, anchor: anchor3)
        #expect(book.held(anchor: anchor3).map(\.tag) == [tag])
        #expect(book.held(anchor: anchor2).count == 5)
    }

    /// A request's place in the broker's table is one word either way, and the two kinds are
    /// told apart for every arrival number (any band, counter and queue) and every tag.
    @Test func aTaskPlaceKeepsWaitingAndRunningApart() {
        typealias Place = BrokerStateMachine.TaskPlace
        #expect(MemoryLayout<Place>.size == 8)
        var generator = SplitMix64(seed: 7)
        for _ in 0..<10_000 {
            let arrival = generator.next()
            guard arrival & BrokerStateMachine.slotMask != UInt64(ServiceBook.none) else { continue }
            #expect(Place.waiting(arrival: arrival).kind == .waiting(arrival: arrival))
            let tag = generator.next() >> (64 - DeliveryBook.tagBits)
            #expect(Place.running(tag: tag).kind == .running(tag: tag))
            #expect(Place.running(tag: tag) != Place.waiting(arrival: arrival))
        }
        let highest = BrokerStateMachine.arrival(1 << 41, priority: -1) | UInt64(ServiceBook.none - 1)
        #expect(Place.waiting(arrival: highest).kind == .waiting(arrival: highest))
        let largest = (1 << DeliveryBook.tagBits) - 1 as UInt64
        #expect(Place.running(tag: largest).kind == .running(tag: largest))
    }

    /// A full book takes nothing more until a slot is freed; a slot's generation comes round
    /// without ever making tag 0.
    @Test func aFullBookHasNoRoomUntilASlotIsFreed() {
        var book = DeliveryBook(limit: 3)
        let anchor = book.addWorker(worker1)
        let first = book.insert(held(1), worker: worker1, anchor: anchor)
        _ = book.insert(held(2), worker: worker1, anchor: anchor)
        #expect(!book.hasRoom)
        #expect(book.take(first, heldBy: worker1, requestID: id(1)) != nil)
        #expect(book.hasRoom)
        var tag = book.insert(held(3), worker: worker1, anchor: anchor)
        #expect(!book.hasRoom)
        var seen: Set<UInt64> = [first]
        for _ in 0..<Int(DeliveryBook.generationMask) + 2 {
            #expect(tag != 0)
            seen.insert(tag)
            #expect(book.take(tag, heldBy: worker1, requestID: id(3)) != nil)
            tag = book.insert(held(3), worker: worker1, anchor: anchor)
        }
        #expect(seen.count == Int(DeliveryBook.generationMask), "every generation but 0, then round again")
    }

    /// Random inserts, takes and departures against a plain model: every held delivery is
    /// found by its tag and in its worker's ring, and nothing else is.
    @Test func randomUseMatchesAModel() {
        var book = DeliveryBook()
        var generator = SplitMix64(seed: 42)
        var anchors: [UInt8: DeliveryBook.Slot] = [:]
        var model: [UInt64: (worker: UInt8, request: UInt64)] = [:]
        var gone: Set<UInt64> = []
        var next: UInt64 = 0
        for _ in 0..<20_000 {
            let worker = UInt8(generator.next() % 6)
            switch generator.next() % 10 {
            case 0:
                guard let anchor = anchors.removeValue(forKey: worker) else {
                    anchors[worker] = book.addWorker(PeerID([worker]))
                    continue
                }
                let lost = book.removeWorker(anchor: anchor)
                let expected = model.filter { $0.value.worker == worker }
                #expect(Set(lost.map(\.tag)) == Set(expected.keys))
                for tag in expected.keys {
                    model[tag] = nil
                    gone.insert(tag)
                }
            case 1...5:
                guard let anchor = anchors[worker] else { continue }
                next += 1
                let tag = book.insert(held(next), worker: PeerID([worker]), anchor: anchor)
                #expect(model[tag] == nil && !gone.contains(tag), "a tag is never given twice")
                model[tag] = (worker, next)
            default:
                guard let (tag, entry) = model.first else { continue }
                #expect(book.take(tag, heldBy: PeerID([entry.worker]), requestID: id(entry.request)) != nil)
                model[tag] = nil
                gone.insert(tag)
            }
        }
        #expect(book.count == model.count)
        for (tag, entry) in model {
            #expect(book[tag]?.task.request.requestID == id(entry.request))
            #expect(book.worker(of: tag) == PeerID([entry.worker]))
        }
        #expect(gone.allSatisfy { book[$0] == nil })
        for (worker, anchor) in anchors {
            #expect(Set(book.held(anchor: anchor).map(\.tag)) == Set(model.filter { $0.value.worker == worker }.keys))
        }
    }
}
