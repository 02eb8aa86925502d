import DequeModule
import HeapModule
import SkyProtocol
import SkyWire

extension BrokerStateMachine {
    /// When a waiting request must be answered if no worker takes it: its deadline or the
    /// broker's maximum wait, whichever comes first.
    @inline(__always) func queueExpiry(_ task: borrowing QueuedRequest) -> Int64 {
        let maxWait = Self.nanoseconds(configuration.maxWait)
        let (limit, overflow) = task.arrivedAt.addingReportingOverflow(maxWait)
        return min(task.deadline, overflow ? Int64.max : limit)
    }

    /// How long a request may wait while nobody serves its service.
    func noWorkersGrace(_ task: QueuedRequest) -> Int64 {
        let asked = task.request.header.noWorkersGraceMilliseconds
        return asked > 0 ? Int64(asked) * 1_000_000 : Self.nanoseconds(configuration.noWorkersGrace)
    }

    /// Whether a connected worker serves the service.
    func isServed(_ service: String) -> Bool { !workers(serving: service).isEmpty }

    /// The connected workers that serve a service, in registration order.
    func workers(serving service: String) -> [PeerID] {
        services.number(of: service).map { services[$0].workers } ?? []
    }

    /// Records into the stats window of a task's service (``QueuedRequest/service``; by number,
    /// so that the task is not copied for it). A task refused before its service had a number
    /// (``ServiceBook/none``) has no window.
    mutating func recordWindow(of service: ServiceBook.Number, _ change: (inout ServiceWindow) -> Void) {
        guard services.isKnown(service) else { return }
        services[service].window.record(change)
    }

    /// Low bits of an arrival number that name its service (``ServiceBook``: 1 M services may be
    /// known at once; the counter above them lasts 2^42 requests, below the two bits of the
    /// priority band).
    static let slotBits: UInt64 = 20
    static let slotMask: UInt64 = (1 << slotBits) - 1

    /// A request's arrival number: its priority band in the top two bits (urgent 0, higher
    /// than normal 1, normal 2, lower 3), the arrival counter, then its service's number (set
    /// when its name is looked up). Queues are ordered by arrival number, so a higher priority waits ahead of every
    /// lower one, and each band in the order it came.
    static func arrival(_ counter: UInt64, priority: Int8) -> UInt64 {
        let band: UInt64 = priority >= 100 ? 0 : priority > 0 ? 1 : priority == 0 ? 2 : 3
        return band << 62 | (counter << slotBits) & ~(3 << 62)
    }

    /// How many services may be known at once: the configured limit, within the numbers.
    var waitingServicesLimit: Int { max(1, min(configuration.waitingServicesLimit, Int(ServiceBook.none))) }

    /// Puts a request in its service's queue (``RequestQueue``), counted in its client's share,
    /// to be answered at its deadline, the broker's maximum wait, or (nobody serves its service)
    /// the no-workers grace, whichever comes first.
    /// - Parameter key: its key, if the caller has it hashed already.
    /// - Parameter graceFrom: when its no-workers grace started (ticks), if not now: a request
    ///   put back after its service's last worker left counts it from its arrival or the loss.
    mutating func enqueue(
        _ task: consuming QueuedRequest, now: Instant, key: TaskKey? = nil, graceFrom: Int64? = nil
    ) {
        let bytes = task.request.queuedSize
        tasks[key ?? task.key] = .waiting(arrival: task.arrival)
        withClient(task.client) { client in
            client.waiting += 1
            client.waitingBytes += bytes
        }
        let asked = task.request.header.noWorkersGraceMilliseconds
        if asked > 0 {
            let grace = Int64(asked) * 1_000_000
            if grace < services[task.service].shortestAskedGrace { services[task.service].shortestAskedGrace = grace }
        }
        var expiry = queueExpiry(task)
        if !services[task.service].isServed {
            let (graceEnd, overflow) = (graceFrom ?? ticks(now)).addingReportingOverflow(noWorkersGrace(task))
            expiry = min(expiry, overflow ? Int64.max : graceEnd)
        }
        queue.insert(consume task, expiry: expiry)
        memoryReturn.queueHolds(bytes: queue.bytes, count: queue.count)
    }

    /// A delivery left its worker (answered, or the worker was lost): a request with a
    /// concurrency limit gives up its key's place. The caller offers the service's waiting work
    /// to workers next (a reply fills its worker; a lost worker's services are filled).
    mutating func vacatePlace(of task: borrowing QueuedRequest) {
        guard task.request.concurrencyLimit > 0, let key = task.request.concurrencyKey else { return }
        queue.vacate(task.service, key: key)
    }

    /// Takes a request that no longer waits out of its client's share. The caller moves it in
    /// ``tasks`` (to running, or out: it is answered).
    private mutating func unmarkWaiting(client: ClientNumber, bytes: Int) {
        withClient(client) { client in
            client.waiting -= 1
            client.waitingBytes -= bytes
        }
    }

    /// Removes a waiting request that will not be dispatched (cancelled or expired); its queue
    /// entry stays, dead and without its body, until it reaches the head or compaction.
    mutating func dropWaiting(_ key: TaskKey, arrival: UInt64) {
        tasks[key] = nil
        guard let left = queue.drop(arrival: arrival) else { return }
        unmarkWaiting(client: left.client, bytes: left.bytes)
    }

    /// Changes the queued request that arrived as number `arrival`, if there is one.
    mutating func updateWaitingRequest(arrival: UInt64, _ change: (inout QueuedRequest) -> Void) {
        queue.update(arrival: arrival, change)
    }

    /// The waiting request that arrived as number `arrival`, if it is still in its queue.
    func waitingRequest(arrival: UInt64) -> QueuedRequest? {
        queue.request(arrival: arrival)
    }

    /// The oldest live request of a service, removed from the queue and from ``tasks``, to be
    /// answered.
    mutating func popWaiting(_ service: ServiceBook.Number) -> QueuedRequest? {
        guard let task = queue.popToAnswer(service) else { return nil }
        unmarkWaiting(client: task.client, bytes: task.request.queuedSize)
        tasks[task.key] = nil
        return task
    }

    /// Arrival number of the oldest live request of a service.
    mutating func oldestWaiting(_ service: ServiceBook.Number) -> UInt64? {
        queue.oldest(service, rates: &jobs.book.keyRates)
    }

    /// Drops what answered requests left behind once it outweighs what is live: the queue's
    /// dead entries (``RequestQueue/compactIfMostlyDead()``), and lease entries of requests
    /// that were answered.
    mutating func compactIfMostlyDead() {
        queue.compactIfMostlyDead()
        if leases.count > 1024 && leases.count > 2 * inFlightCount {
            var entries: [LeaseEntry] = []
            deliveries.forEach { tag, _, held in
                guard !held.answered, let expiry = leaseExpiry(held.task) else { return }
                entries.append(LeaseEntry(expiry: expiry, tag: tag))
            }
            leases = ExpiryQueue(entries)
        }
        if queue.count == 0
            && memoryReturn.held(bytes: configuration.memoryReleaseThreshold, orCount: configuration.memoryReleaseCount)
        {
            releaseStorage()
        }
    }

    /// The queue drained after holding much: Swift's tables keep the capacity they grew to, so
    /// they are made anew (what is still live is copied), and the shell returns the freed
    /// memory to the system. Costs one pass over what is live, once per large drain.
    private mutating func releaseStorage() {
        // Nothing waits: every task is at a worker.
        tasks = tasks.resized(minimumCapacity: Self.taskTableRoom)
        queue.releaseStorage()
        leases = ExpiryQueue(leases.unordered)
        clients.shrink()
        memoryReturn.storageReleased()
    }

    /// When a delivery of `task` is taken from its worker: deadline + lease grace; `nil` without
    /// a deadline. A job's attempt at its timeout itself: a caller of `scan` hears its own
    /// deadline on its side and the grace only spares a worker a race with it, but nobody
    /// watches a job's timeout except the broker, so a grace there would lengthen every attempt
    /// the user bounded (``expireLeases`` then gives the worker the grace to answer the cancel).
    @inline(__always)  // called, it copied the whole machine (2 KB) to the stack from `hand`, which mutates
    func leaseExpiry(_ task: QueuedRequest) -> Int64? {
        guard task.deadline != Int64.max else { return nil }
        // A job's attempt ends at its timeout; a call that asked to be kept is kept at its
        // deadline (its worker goes on).
        if Self.isJob(task) || task.request.header.keepIfAbandoned { return task.deadline }
        let (expiry, overflow) = task.deadline.addingReportingOverflow(Self.nanoseconds(configuration.leaseGrace))
        return overflow ? Int64.max : expiry
    }

    /// The worker to give a new task of `service`: a free credit, least loaded, least recently
    /// used; one still holding a cancelled delivery of the same request only if no other is free.
    mutating func bestWorker(for service: ServiceBook.Number, avoiding key: TaskKey? = nil) -> PeerID? {
        guard deliveries.hasRoom else { return nil }
        var best: (peer: PeerID, inFlight: Int, capacity: Int, lastDispatch: UInt64)?
        var fallback: PeerID?
        for peer in services[service].workers {
            let seen = readWorker(peer) { candidate in
                (
                    free: candidate.freeCredits > 0,
                    avoid: key.map { !candidate.cancelledKeys.isEmpty && candidate.cancelledKeys.contains($0) }
                        ?? false,
                    inFlight: candidate.held, capacity: candidate.capacity,
                    lastDispatch: candidate.lastDispatch
                )
            }
            guard let candidate = seen, candidate.free else { continue }
            if candidate.avoid {
                fallback = fallback ?? peer
                continue
            }
            guard let current = best else {
                best = (peer, candidate.inFlight, candidate.capacity, candidate.lastDispatch)
                continue
            }
            // Compare load ratios without division: a/b < c/d  ⇔  a·d < c·b.
            let lhs = candidate.inFlight * current.capacity
            let rhs = current.inFlight * candidate.capacity
            if lhs < rhs || (lhs == rhs && candidate.lastDispatch < current.lastDispatch) {
                best = (peer, candidate.inFlight, candidate.capacity, candidate.lastDispatch)
            }
        }
        return best?.peer ?? fallback
    }

    /// Makes a delivery of `task` to `peer` (its credit, its lease) without sending it.
    /// - Parameters:
    ///   - index: the worker's place in ``workers``, if the caller found it already.
    ///   - key: the task's key, if the caller has it hashed already.
    /// - Returns: the delivery's tag, and whether the worker takes packed REQUESTs (read while
    ///   its record is at hand, so that the send needs no second lookup).
    mutating func hand(
        _ task: consuming QueuedRequest, to peer: PeerID, at index: WorkerIndex? = nil, waited: Int64? = nil,
        key: TaskKey? = nil
    ) -> (tag: UInt64, packed: Bool) {
        if task.deliveries < .max { task.deliveries += 1 }
        dispatchCounter += 1
        let order = dispatchCounter
        let take = { (worker: inout WorkerRecord) -> (anchor: DeliveryBook.Slot, packed: Bool) in
            worker.held += 1
            worker.lastDispatch = order
            return (worker.anchor, worker.takesPacked)
        }
        guard let (anchor, packed) = index.map({ withWorker(at: $0, take) }) ?? withWorker(peer, take) else {
            preconditionFailure("a task is handed only to a registered worker")
        }
        let (key, lease) = (key ?? task.key, leaseExpiry(task))
        let tag = deliveries.insert(
            InFlightTask(task: consume task, waited: waited, key: key), worker: peer, anchor: anchor)
        // A waiting request moves to running in place; a new one comes in.
        tasks[key] = .running(tag: tag)
        if let lease { leases.insert(LeaseEntry(expiry: lease, tag: tag)) }
        return (tag, packed)
    }

    /// Sends a delivery: with its trace frame to a worker that takes one (and a span's worth of
    /// facts for the shell), without to one that does not.
    /// - Parameter waited: how long the request waited for this delivery, in nanoseconds.
    mutating func send(
        _ request: consuming TaskRequest, waited: Int64, tag: UInt64, packed: Bool, delivery: UInt32,
        to peer: PeerID, into actions: inout [BrokerAction]
    ) {
        func command(_ request: consuming TaskRequest) -> BrokerToWorker {
            packed
                ? .packedRequest(tag: DeliveryTag(number: tag), request)
                : .request(tag: DeliveryTag(number: tag), request)
        }
        guard request.trace != nil, let worker = workers[peer] else {
            actions.append(.sendToWorker(peer, command(request)))
            return
        }
        guard worker.acceptsTrace else {
            request.trace = nil
            actions.append(.sendToWorker(peer, command(request)))
            return
        }
        actions.append(
            .sendTraced(
                peer, tag: DeliveryTag(number: tag), request,
                TracedDispatch(waitedNanoseconds: waited, worker: worker.name, delivery: delivery, packed: packed)))
    }

    /// Hands `task` to a worker and sends it. The task is moved into its delivery, and the
    /// message takes its own reference to the request: copies of a task retain each of its
    /// strings and arrays.
    mutating func dispatch(
        _ task: consuming QueuedRequest, to peer: PeerID, at index: WorkerIndex? = nil, now: Instant,
        key: TaskKey? = nil, into actions: inout [BrokerAction]
    ) {
        let waited = ticks(now) - task.arrivedAt
        let delivery = UInt32(task.deliveries) + 1
        let request = task.request
        let (tag, packed) = hand(consume task, to: peer, at: index, waited: waited, key: key)
        if configuration.taskEvents {
            publishTask(
                .taskDispatched,
                TaskInfo(
                    requestID: request.requestID.description, service: request.service,
                    deliveries: Int(delivery), worker: peer.description),
                into: &actions)
        }
        send(request, waited: waited, tag: tag, packed: packed, delivery: delivery, to: peer, into: &actions)
    }

    /// Gives a worker queued work until its credits are used up or nothing it serves is waiting.
    /// - Parameter known: the worker's place in ``workers``, if the caller found it already (a
    ///   reply's worker): its dispatches then look it up by that place instead of its id.
    mutating func fill(_ peer: PeerID, at known: WorkerIndex? = nil, now: Instant, into actions: inout [BrokerAction]) {
        guard let index = known ?? workerIndex(of: peer) else { return }
        // Only these two fields: a copy of the whole record would retain its tables and arrays,
        // and the dispatches below, which change the record, would then copy them on write.
        let (numbers, credits) = withWorker(at: index) { ($0.serviceNumbers, $0.freeCredits) }
        // Looked at per service only while some service is paused or limited (a load, not an
        // access).
        let anyPaused = !services.paused.isEmpty
        let anyLimited = !services.limits.isEmpty
        let nowTicks = anyLimited ? ticks(now) : 0
        var free = credits
        while free > 0, deliveries.hasRoom {
            var oldest: (service: ServiceBook.Number, arrival: UInt64)?
            for service in numbers {
                guard !anyPaused || !services[service].paused, let arrival = oldestWaiting(service) else { continue }
                // A limited service without a token waits for the next (``rateWake(now:into:)``).
                if anyLimited, !hasStart(service, now: nowTicks) { continue }
                if oldest == nil || arrival < oldest!.arrival { oldest = (service, arrival) }
            }
            // Requests first: a call has a caller waiting on a deadline, a job waits on disk. Jobs
            // take the credits no waiting request needs.
            if oldest == nil, !jobStartsHeld, jobs.hasPrepared,
                let service = jobs.best(among: withWorker(at: index) { $0.services })
            {
                if anyLimited, let number = services.number(of: service), !takeStart(number, now: nowTicks) {
                    continue  // now throttled: `best` passes it over
                }
                dispatchJob(of: service, to: peer, now: now, into: &actions)
                free -= 1
                continue
            }
            // The head `oldestWaiting` just found live, and nothing changed since. Moved out of
            // the optional (`take()`): bound with `guard let`, the request was copied out of it
            // (each of its references counted up) and the optional destroyed.
            guard let pick = oldest else { return }
            var popped = queue.popFirst(pick.service, rates: &jobs.book.keyRates)
            guard popped != nil else { return }
            let task = popped.take()!
            unmarkWaiting(client: task.client, bytes: task.request.queuedSize)
            if anyLimited { _ = takeStart(pick.service, now: nowTicks) }
            dispatch(consume task, to: peer, at: index, now: now, into: &actions)
            free -= 1
        }
    }
}
