import SkyProtocol

/// The deliveries workers hold, one per slot of an array: a delivery's tag names its slot, so a
/// reply, a CANCEL or a lease finds its delivery by index instead of by hash.
///
/// Before, each worker kept a dictionary of its deliveries by tag, and the broker a second one
/// of running requests by key: four of a task's fifteen hashes at 256 in flight.
///
/// A tag is the slot above ``generationBits`` bits of the slot's generation, 44 bits in all,
/// so that a running request's place in the broker's table stays one word
/// (``BrokerStateMachine/TaskPlace``). A slot's generation moves on each time it is freed, so a
/// late reply to an earlier delivery in the same slot (a hung attempt the client cancelled)
/// names a tag that no longer exists and is dropped as stale; the reply's worker and request id
/// are checked as well, which covers a generation that came round again.
///
/// The book holds at most ``slotLimit`` slots (16,777,216: workers and their deliveries); while
/// it is full, no worker is given more work and none may register (``hasRoom``).
///
/// Each worker's deliveries form a ring through their slots, starting at an anchor slot the
/// worker takes when it registers, so a worker that leaves gives back exactly its own
/// deliveries, without a pass over everybody's.
struct DeliveryBook: Sendable {
    typealias Slot = UInt32
    typealias Held = BrokerStateMachine.InFlightTask

    static let generationBits: UInt64 = 20
    static let tagBits: UInt64 = 44
    static let generationMask: UInt64 = (1 << generationBits) - 1
    /// Slots at most: a slot's number fits above the generation in a tag.
    static let slotLimit = 1 << (tagBits - generationBits)

    private struct Entry: Sendable {
        var generation: UInt32 = 1
        var previous: Slot
        var next: Slot
        var worker: PeerID
        /// The delivery; nil in an anchor or a free slot.
        var held: Held?
        /// Whether `held` is set, and its request id: the checks a reply's lookup makes, kept
        /// apart from the delivery, which a check of the optional copied (retaining its
        /// request's strings and arrays).
        var isHeld = false
        var requestID = RequestID(high: 0, low: 0)
    }

    private var entries: [Entry] = []
    private var free: [Slot] = []
    /// Slots this book holds at most.
    let limit: Int
    /// Slots that hold a delivery.
    private(set) var count = 0

    /// - Parameter limit: at most ``slotLimit`` (tests make it small).
    init(limit: Int = DeliveryBook.slotLimit) {
        self.limit = min(limit, Self.slotLimit)
    }

    /// Whether a slot is left for a delivery or a worker.
    var hasRoom: Bool { !free.isEmpty || entries.count < limit }

    /// A new worker's anchor: its deliveries are kept in a ring that starts there.
    mutating func addWorker(_ worker: PeerID) -> Slot {
        let slot = claim(worker: worker)
        entries[Int(slot)].previous = slot
        entries[Int(slot)].next = slot
        return slot
    }

    /// Frees a worker's anchor and its deliveries, which are returned with their tags.
    mutating func removeWorker(anchor: Slot) -> [(tag: UInt64, held: Held)] {
        var all: [(tag: UInt64, held: Held)] = []
        var slot = entries[Int(anchor)].next
        while slot != anchor {
            let next = entries[Int(slot)].next
            if let held = entries[Int(slot)].held.take() { all.append((tag(of: slot), held)) }
            release(slot)
            count -= 1
            slot = next
        }
        release(anchor)
        return all
    }

    /// Records a delivery held by the worker whose anchor is `anchor`.
    /// - Returns: its tag.
    mutating func insert(_ held: consuming Held, worker: PeerID, anchor: Slot) -> UInt64 {
        let slot = claim(worker: worker)
        let after = entries[Int(anchor)].next
        entries[Int(slot)].isHeld = true
        entries[Int(slot)].requestID = held.task.request.requestID
        // Moved in, not copied (a copy counted the request's references up and down again).
        entries[Int(slot)].held = consume held
        entries[Int(slot)].previous = anchor
        entries[Int(slot)].next = after
        entries[Int(anchor)].next = slot
        entries[Int(after)].previous = slot
        count += 1
        return tag(of: slot)
    }

    /// The delivery with this tag, if it is still held.
    subscript(tag: UInt64) -> Held? {
        guard let slot = slot(of: tag) else { return nil }
        return entries[slot].held
    }

    /// The worker that holds the delivery with this tag.
    func worker(of tag: UInt64) -> PeerID? {
        guard let slot = slot(of: tag) else { return nil }
        return entries[slot].worker
    }

    /// Runs `change` on the delivery with this tag in place, if it is still held.
    mutating func update<R>(_ tag: UInt64, _ change: (inout Held) -> R) -> R? {
        guard let slot = slot(of: tag) else { return nil }
        return change(&entries[slot].held!)
    }

    /// Takes the delivery with this tag, if `worker` holds it and it is of `requestID`: a reply
    /// names its delivery, and one that names another's is stale.
    mutating func take(_ tag: UInt64, heldBy worker: PeerID, requestID: RequestID) -> Held? {
        guard let slot = slot(of: tag), entries[slot].worker == worker, entries[slot].requestID == requestID
        else { return nil }
        // Moved out, not copied (a copy retains the request's strings and arrays).
        let held = entries[slot].held.take()
        entries[slot].isHeld = false
        let (previous, next) = (entries[slot].previous, entries[slot].next)
        entries[Int(previous)].next = next
        entries[Int(next)].previous = previous
        release(Slot(slot))
        count -= 1
        return held
    }

    /// The deliveries of the worker whose anchor is `anchor`, with their tags.
    func held(anchor: Slot) -> [(tag: UInt64, held: Held)] {
        var all: [(tag: UInt64, held: Held)] = []
        var slot = entries[Int(anchor)].next
        while slot != anchor {
            if let held = entries[Int(slot)].held { all.append((tag(of: slot), held)) }
            slot = entries[Int(slot)].next
        }
        return all
    }

    /// Every delivery held, with its tag and worker (a pass over all slots: for rare rebuilds).
    func forEach(_ body: (UInt64, PeerID, Held) -> Void) {
        for index in entries.indices {
            guard let held = entries[index].held else { continue }
            body(tag(of: Slot(index)), entries[index].worker, held)
        }
    }

    private func tag(of slot: Slot) -> UInt64 {
        UInt64(slot) << Self.generationBits | UInt64(entries[Int(slot)].generation)
    }

    private func slot(of tag: UInt64) -> Int? {
        let slot = Int(truncatingIfNeeded: tag >> Self.generationBits)
        guard slot >= 0, slot < entries.count, UInt64(entries[slot].generation) == tag & Self.generationMask,
            entries[slot].isHeld
        else { return nil }
        return slot
    }

    private mutating func claim(worker: PeerID) -> Slot {
        precondition(hasRoom, "the broker checks hasRoom before it hands work or registers a worker")
        if let slot = free.popLast() {
            entries[Int(slot)].worker = worker
            return slot
        }
        let slot = Slot(entries.count)
        entries.append(Entry(previous: slot, next: slot, worker: worker))
        return slot
    }

    /// Frees a slot; its generation moves on, so its tags so far name nothing.
    private mutating func release(_ slot: Slot) {
        // Only a slot still holding its delivery: storing nil over nil destroyed the old nil
        // through the runtime's generic `Optional` witness (the delivery is too large a type to
        // be destroyed inline), on every reply.
        if entries[Int(slot)].isHeld {
            entries[Int(slot)].held = nil
            entries[Int(slot)].isHeld = false
        }
        // 1 ... 2^20 - 1, round again: a tag is never 0.
        let next = (UInt64(entries[Int(slot)].generation) + 1) & Self.generationMask
        entries[Int(slot)].generation = UInt32(max(next, 1))
        free.append(slot)
    }
}
