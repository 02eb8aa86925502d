import DequeModule
import HeapModule
import SkyJSON
import SkyProtocol
import SkyWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The broker's logic, free of sockets, threads and clocks.
///
/// Inputs are messages from clients and workers (as frames, after the ROUTER's routing-id frame),
/// failed sends, subscriptions to the event socket, clock ticks and shutdown; every input carries
/// `now`, so time is injected and tests move it by hand. Each input appends ``BrokerAction``s for
/// the I/O shell to perform.
///
/// **Keys.** A request is known by (client, request id) everywhere: two clients may use the same
/// id, and a CANCEL acts only on its sender's requests. Each handing of a request to a worker is
/// a *delivery* with a broker-chosen tag, which the worker echoes; so a late reply to a delivery
/// the client cancelled (a hung attempt it retried) is told from the retry's, and only returns
/// the credit.
///
/// **Routing.** A request goes to a worker that serves its service and has a free credit: the
/// least loaded (outstanding ÷ capacity), then the one given work longest ago; a retry avoids a
/// worker still holding a cancelled delivery of it. Otherwise it waits in a per-service FIFO
/// queue, bounded in count (``Configuration/queueLimit``) and body bytes
/// (``Configuration/queueBytesLimit``), of which one client may hold at most
/// ``Configuration/clientQueueShare``; beyond that it is refused as `overloaded`. A worker that
/// frees a credit or joins takes the oldest waiting request among its services. Payloads are
/// never decoded.
///
/// **Liveness.** Any message from a worker refreshes it; one silent for `liveness × interval`
/// expires. The broker heartbeats every worker each interval.
///
/// **Never lose, never duplicate.** Tasks held by a worker that leaves or expires go back to the
/// front of their queue (after ``Configuration/maxDeliveries`` deliveries the client gets
/// `workerLost` instead). A reply for a task its worker no longer holds is dropped and counted.
/// Every accepted request gets exactly one reply: the worker's, or one the broker makes
/// (`deadlineExceeded`, `noWorkers`, `workerLost`, `cancelled`, `brokerShuttingDown`).
///
/// **Deadlines.** A request's `timeout-ms` sets its deadline. One still waiting at its deadline, or
/// after ``Configuration/maxWait`` (which also bounds requests without a deadline), is answered
/// `deadlineExceeded`; one whose service no connected worker serves is answered `noWorkers` after
/// ``Configuration/noWorkersGrace``. One running past deadline + ``Configuration/leaseGrace`` (a
/// lease) is answered `deadlineExceeded` and the worker is told to cancel it; its slot stays
/// taken until the worker answers, since the handler may still run. A job's attempt has no
/// grace: it is cancelled at its timeout (``leaseExpiry(_:)``). Expiries are answered at most
/// ``Configuration/expiryBatch`` per tick, so that a storm of them never holds up heartbeats.
///
/// **Parts.** Durable jobs are a sub-machine of their own, ``JobScheduler`` (inputs and actions
/// of its own; `+Jobs` does what it asks with workers and sockets). The books the routing
/// keeps are types of their own: ``ServiceBook``, ``ClientBook``, ``DeliveryBook``; and so
/// are the periodic work (``PeriodicWork``), the stats (``WorkTally``), the event socket's
/// numbering and greetings (``EventPublishing``) and the return of memory (``MemoryReturn``).
///
/// **Inputs**, every one the shell feeds (docs/architecture.md has them with their actions):
/// - from the clients ROUTER: ``clientMessage(from:message:now:into:)``,
///   ``clientUnreachable(_:into:)``;
/// - from the workers ROUTER: ``workerMessage(from:message:host:key:now:into:)``,
///   ``workerUnreachable(_:now:into:)``, ``refuseRegistration(_:reason:now:into:)``;
/// - from the events XPUB: ``subscriberJoined(now:into:)``, ``eventSubscription(_:subscribed:)``;
/// - from the journal: ``recover(_:now:into:)`` at start, ``journalAnswered(_:now:into:)``;
/// - from the shell itself: ``tick(now:into:)``, ``dropped(_:now:into:)``,
///   ``descriptorsChecked(exhausted:limit:now:into:)``, ``loopIteration(took:)``,
///   ``announce(clients:workers:)``, ``shutdown(now:into:)``.
package struct BrokerStateMachine: Sendable {
    /// The machine's time (see ``MonotonicInstant``).
    package typealias Instant = MonotonicInstant

    /// What the machine is told at its start: ``BrokerRouting``.
    package typealias Configuration = BrokerRouting

    /// A client, numbered while it has requests at the broker: keys and queue entries carry the
    /// 4-byte number instead of the routing id.
    typealias ClientNumber = UInt32

    struct ClientRecord: Sendable {
        let peer: PeerID
        /// Its requests waiting for a worker, and their body bytes.
        var waiting = 0
        var waitingBytes = 0
        /// Its latest REQUEST came packed: its replies go packed (it takes both forms then).
        var packed = false
        /// Its requests not yet answered (waiting or at a worker), and its cancelled deliveries
        /// a worker still holds: while one is held, the client keeps its number, so that a
        /// retry of the same id is recognised and sent to another worker (``WorkerRecord/cancelledKeys``).
        var outstanding = 0
    }

    /// A request the broker accepted and has not answered.
    struct QueuedRequest: Sendable {
        var client: ClientNumber
        /// How many times it was handed to a worker (at most 65,535 are counted: the limit,
        /// ``Configuration/maxDeliveries``, is 1,000 at most on the command line). Two bytes, so
        /// that ``dropped`` fits in the same word: the queue holds one of these per waiting request.
        var deliveries: UInt16 = 0
        /// Its queue entry stays behind it, dead: it was cancelled or expired while it waited
        /// (its body is dropped; ``BrokerStateMachine/dropWaiting(_:arrival:)``).
        var dropped = false
        var request: TaskRequest
        /// Arrival order over all services, so a worker serving several takes the oldest of the
        /// highest priority: the priority band in the top two bits, a counter, the queue's slot
        /// in the low ``BrokerStateMachine/slotBits`` (``BrokerStateMachine/arrival(_:priority:)``).
        var arrival: UInt64
        /// When it arrived, as nanoseconds after the machine's epoch (see ``BrokerStateMachine/ticks(_:)``).
        var arrivedAt: Int64

        /// Its key, hashed anew (a delivery keeps the hash, ``InFlightTask/key``).
        var key: TaskKey { TaskKey(client: client, requestID: request.requestID) }

        /// Its service's number (``ServiceBook``), in the arrival number's low bits.
        var service: ServiceBook.Number { ServiceBook.Number(arrival & BrokerStateMachine.slotMask) }

        /// The caller's deadline; `Int64.max` for none.
        var deadline: Int64 {
            let timeout = request.header.timeoutMilliseconds
            return timeout > 0 ? arrivedAt + Int64(timeout) * 1_000_000 : Int64.max
        }
    }

    /// Identifies a request: the client that sent it and its request id, with their hash,
    /// computed once (``TaskTable``).
    struct TaskKey: Hashable, Sendable {
        let client: ClientNumber
        let requestID: RequestID
        /// The request id mixed under the process's seed, then with the client's number.
        let hash: Int

        /// Random for each process, so that a client cannot aim its request ids at one slot.
        static let seed = UInt64.random(in: .min ... .max)

        init(client: ClientNumber, requestID: RequestID) {
            let mixed = SplitMix64.mix(requestID.mixed(with: Self.seed) ^ UInt64(client))
            self.init(client: client, requestID: requestID, hash: Int(truncatingIfNeeded: mixed))
        }

        /// A key whose hash was computed before (a delivery's, ``InFlightTask/key``).
        init(client: ClientNumber, requestID: RequestID, hash: Int) {
            self.client = client
            self.requestID = requestID
            self.hash = hash
        }

        static func == (lhs: Self, rhs: Self) -> Bool { lhs.client == rhs.client && lhs.requestID == rhs.requestID }

        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    struct InFlightTask: Sendable {
        /// Its client and request id make its key, whose hash is kept: ``keepAsJob(client:)``
        /// changes the client.
        var task: QueuedRequest
        /// Already answered (cancelled by its client): the worker's reply only returns the credit.
        var answered = false
        /// How long the request waited for this delivery, in nanoseconds (nil for a job, which
        /// waits in the job book): recorded with the reply, so the service's window is
        /// touched once per task.
        var waited: Int64? = nil
        /// ``key``'s hash, kept so that the reply finds the request in ``tasks`` without
        /// hashing it again (the queue's requests do not keep it: 8 bytes each).
        private var keyHash: Int

        /// - Parameter key: the task's key, if the caller has it hashed already.
        init(task: QueuedRequest, waited: Int64? = nil, key: TaskKey? = nil) {
            keyHash = (key ?? task.key).hash
            self.task = task
            self.waited = waited
        }

        var key: TaskKey {
            let key = TaskKey(client: task.client, requestID: task.request.requestID, hash: keyHash)
            assert(keyHash == TaskKey(client: key.client, requestID: key.requestID).hash, "a delivery's key changed")
            return key
        }

        /// A kept call's delivery becomes its job's first attempt: it is the jobs' client's now,
        /// under a key of that client.
        mutating func keepAsJob(client: ClientNumber) {
            task.client = client
            task.request.header.keepIfAbandoned = false
            task.request.header.timeoutMilliseconds = 0
            keyHash = task.key.hash
        }
    }

    struct WorkerRecord: Sendable {
        let id: PeerID
        var name: String
        var capacity: Int
        var services: [String]
        /// The same services by number (``ServiceBook``), for the dispatch path.
        var serviceNumbers: [ServiceBook.Number] = []
        /// Where its deliveries start in ``BrokerStateMachine/deliveries``.
        var anchor: DeliveryBook.Slot = 0
        /// Deliveries it holds (cancelled ones too, until it answers them): its used credits.
        var held = 0
        /// Requests whose delivery here was cancelled but not yet answered by the worker (it may
        /// hang): their retries go elsewhere when they can.
        var cancelledKeys: Set<TaskKey> = []
        /// When it was last given a task (a dispatch counter), for round robin among equals.
        var lastDispatch: UInt64 = 0
        /// It said DRAINING: no new tasks.
        var draining = false
        /// It announced ``TraceContext/feature``: its REQUESTs may carry the trace frame.
        var acceptsTrace = false
        /// It announced ``WireFormat/packedFeature``: its REQUESTs go packed.
        var takesPacked = false
        /// The address it connected from, if the transport tells.
        var host: String?
        /// The authenticated key it registered with (CURVE), which owns the registration.
        var key: String?
        /// Replies it sent for tasks it held.
        var completed: UInt64 = 0
        /// Of those, replies that were not a success.
        var failed: UInt64 = 0
        /// When any message from it last arrived; it expires `expiry` later.
        var lastHeard: Instant

        var freeCredits: Int { draining ? 0 : capacity - held }

        var info: WorkerInfo {
            WorkerInfo(id: id.description, name: name, capacity: capacity, services: services, host: host)
        }

        /// The info with its load, as snapshots and stats show it.
        func load(now: Instant) -> WorkerInfo {
            var info = info
            info.inFlight = held
            info.completed = completed
            info.failed = failed
            info.lastHeardMilliseconds = Int((now - lastHeard).wholeMilliseconds)
            return info
        }
    }

    /// When a delivery's lease runs out: its deadline plus the lease grace.
    struct LeaseEntry: Comparable, Sendable {
        var expiry: Int64
        var tag: UInt64

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.expiry < rhs.expiry }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.expiry == rhs.expiry && lhs.tag == rhs.tag }
    }

    /// A service lost its last worker while requests of it waited: they get `noWorkers` at
    /// `expiry` unless a worker of it joins before.
    struct UnservedEntry: Comparable, Sendable {
        var expiry: Int64
        var service: String

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.expiry < rhs.expiry }
    }

    package private(set) var configuration: Configuration
    /// Added and removed only through ``addWorker(_:)``, ``removeWorker(_:)`` and
    /// ``removeAllWorkers()``, which tell ``workerLookup``.
    private(set) var workers: [PeerID: WorkerRecord] = [:]
    /// The worker the last lookup by routing id found (see ``workerIndex(of:)``).
    private var workerLookup = LastLookup<PeerID, WorkerRecord>()
    /// Each known service's workers, pause, limit and stats, by number.
    var services = ServiceBook()
    var clients = ClientBook()
    /// The service name the last REQUEST named (see ``NameCache``).
    var serviceNames = NameCache()
    /// Every accepted request not yet answered, waiting or at a worker. Made with room for
    /// ``taskTableRoom`` (see there).
    var tasks = TaskTable(minimumCapacity: taskTableRoom)
    /// The requests ``tasks`` has room for from the start: with a few hundred in flight its
    /// slots stay mostly empty, so probes and removals touch few neighbours. Above it the table
    /// grows, so a deep queue costs what it did.
    static let taskTableRoom = 4096
    /// The requests of ``tasks`` that wait for a worker: a sub-machine of its own.
    var queue = RequestQueue()
    /// The deliveries workers hold, cancelled ones included (by tag, see ``DeliveryBook``).
    var deliveries = DeliveryBook()
    var leases = ExpiryQueue<LeaseEntry>()
    var unserved = Heap<UnservedEntry>()
    /// The first instant the machine saw; compact timestamps count from it.
    var epoch: Instant?
    var dispatchCounter: UInt64 = 0
    /// Event numbers, watchers' topics and the pace of greetings.
    var events = EventPublishing()
    /// When heartbeats and stats are due.
    var periodic = PeriodicWork()
    /// The work workers did, in total and this stats period.
    var tally = WorkTally()
    /// When freed memory goes back to the system after a large drain.
    var memoryReturn = MemoryReturn()
    /// Answers to misdirected or refused peers, at most ``Configuration/refusalsPerSecond`` a
    /// second per port.
    var refusals: RateBudget<BrokerPort>
    /// Log lines about what peers send wrong, at most ``Configuration/peerLinesPerSecond`` a
    /// second of each text (see ``logAboutPeer(_:_:now:into:fields:)``).
    var peerLines: RateBudget<PeerLine>
    /// Since when the process has had no file descriptor left, if it has none.
    var descriptorShortage: DescriptorShortage?
    /// More expiries were due than one tick answers: the shell should tick again soon.
    package internal(set) var hasExpiryBacklog = false
    var stopping = false
    /// The shared job store stopped answering (``storeAnswering(_:now:into:)``): no job goes to
    /// a worker until it answers again.
    var jobStartsHeld = false
    package internal(set) var counters = BrokerCounters()
    /// Durable jobs: a sub-machine of their own (see `BrokerStateMachine+Jobs.swift`).
    var jobs: JobScheduler
    /// The last instant an input carried, for work that follows from a reply.
    var lastNow: Instant?
    /// Replies to kept calls just sent, in case their client is gone.
    var keptReplies = KeptReplies()
    /// Kept calls in flight by id alone, and callers waiting on them.
    var keptCalls = KeptCallIndex()
    /// Rate limits: where each comes from, and which services wait for a token.
    var rates = RateLimitBook()

    package init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        refusals = RateBudget(perSecond: configuration.refusalsPerSecond)
        peerLines = RateBudget(perSecond: configuration.peerLinesPerSecond)
        jobs = JobScheduler(
            configuration: JobScheduler.Configuration(configuration),
            seed: configuration.jobIDSeed ?? UInt64.random(in: .min ... .max))
        applyFlaggedLimits()
    }

    // MARK: Worker records

    /// Runs `change` on a worker's record in place. One lookup however many fields change, and
    /// the record is never moved out and back: each `workers[peer]?.field = x` hashes the peer
    /// again and moves the whole record, the largest cost in the machine's profile then.
    @inline(__always)
    mutating func withWorker<R>(_ peer: PeerID, _ change: (inout WorkerRecord) -> R) -> R? {
        guard let index = workerIndex(of: peer) else { return nil }
        return change(&workers.values[index])
    }

    /// A known worker's place in ``workers``: a worker's replies come in runs (a batch of them
    /// per read), found by comparison with the last one while none joined or left since.
    mutating func workerIndex(of peer: PeerID) -> WorkerIndex? {
        workerLookup.index(of: peer, in: workers)
    }

    /// A worker joins (or its record is replaced).
    mutating func addWorker(_ record: WorkerRecord) {
        workerLookup.changed()
        workers[record.id] = record
    }

    /// A worker leaves: its record, if it was known.
    mutating func removeWorker(_ peer: PeerID) -> WorkerRecord? {
        workerLookup.changed()
        return workers.removeValue(forKey: peer)
    }

    /// Every worker leaves (the broker stops).
    mutating func removeAllWorkers() {
        workerLookup.changed()
        workers.removeAll()
    }

    /// A worker's place in ``workers``: valid until a worker is added or removed.
    typealias WorkerIndex = Dictionary<PeerID, WorkerRecord>.Index

    /// Runs `change` on the record at `index` (found earlier, with no worker added or removed
    /// since), in place. Reads go this way too: the dictionary's getter copies the whole record.
    @inline(__always)
    mutating func withWorker<R>(at index: WorkerIndex, _ change: (inout WorkerRecord) -> R) -> R {
        change(&workers.values[index])
    }

    /// Runs `change` on a client's record in place, with one lookup (as ``withWorker(_:_:)``).
    @inline(__always)
    mutating func withClient<R>(_ number: ClientNumber, _ change: (inout ClientRecord) -> R) -> R? {
        clients.update(number, change)
    }

    /// Reads from a worker's record without copying it (through the in-place accessor: the
    /// dictionary's getter copies the whole record, its tables' references included).
    @inline(__always)
    mutating func readWorker<R>(_ peer: PeerID, _ read: (borrowing WorkerRecord) -> R) -> R? {
        guard let index = workerIndex(of: peer) else { return nil }
        return withWorker(at: index) { read($0) }
    }

    // MARK: Queries

    /// Requests waiting for a worker.
    package var queuedCount: Int { queue.count }

    /// Bytes of the requests waiting for a worker.
    var queuedBytes: Int { queue.bytes }

    /// Queue entries of requests cancelled or expired while they waited (for tests of their
    /// bound).
    var deadQueued: Int { queue.deadEntries }

    /// Tasks outstanding at workers (not those their client cancelled).
    package var inFlightCount: Int { tasks.count - queue.count }

    package var workerCount: Int { workers.count }

    /// Entries in the queues and the deadline queue, live or not (for tests of their bounds).
    var bookkeepingEntries: (queued: Int, deadlines: Int) {
        queue.entryCounts
    }

    /// Live waiting requests per service.
    func queuedPerService() -> [String: Int] {
        var queued: [String: Int] = [:]
        for number in services.known where queue.count(of: number) > 0 {
            queued[services[number].name] = queue.count(of: number)
        }
        return queued
    }

    /// The current view, as answered to `mmi.workers`.
    package func snapshot(now: Instant) -> ClusterSnapshot {
        let list = workerLoads(now: now)
        var snapshot = ClusterSnapshot(
            seq: events.lastSeq, workers: list, queued: queuedPerService(),
            inFlight: inFlightCount, counters: counters, memory: configuration.memoryProbe?(),
            broker: configuration.instance, tasksCompleted: tally.completed, tasksFailed: tally.failed)
        snapshot.jobs = jobs.counts(keptWaiters: keptCalls.waiterCount)
        snapshot.epoch = configuration.epoch
        return snapshot
    }

    /// Every worker with its load, in a stable order.
    func workerLoads(now: Instant) -> [WorkerInfo] {
        workers.values.sorted { $0.id.bytes.lexicographicallyPrecedes($1.id.bytes) }.map { $0.load(now: now) }
    }

    // MARK: Clients

    /// A message arrived on the clients ROUTER from `client`.
    package mutating func clientMessage(
        from client: PeerID, frames: [[UInt8]], now: Instant, into actions: inout [BrokerAction]
    ) {
        clientMessage(from: client, message: Frames(frames), now: now, into: &actions)
    }

    /// A message arrived on the clients ROUTER from `client` (its frames after the routing id,
    /// in one buffer, as the shell reads them).
    package mutating func clientMessage(
        from client: PeerID, message frames: Frames, now: Instant, into actions: inout [BrokerAction]
    ) {
        clockKeyRates(now)
        let command: ClientToBroker
        do {
            command = try ClientToBroker.decode(frames, names: &serviceNames)
        } catch {
            if (try? WorkerToBroker.decode(frames)) != nil {
                misdirected(worker: client, now: now, into: &actions)
                return
            }
            counters.malformedClientMessages += 1
            logAboutPeer(.warning, "dropped malformed message from client", now: now, into: &actions) {
                ["peer": "\(client)", "error": "\(error)"]
            }
            return
        }
        switch consume command {
        case .request(let request):
            accept(request, from: client, packed: false, now: now, into: &actions)
        case .packedRequest(let request):
            accept(request, from: client, packed: true, now: now, into: &actions)
        case .cancel(let requestID):
            // Only the sender's own requests: a client without requests here has nothing to cancel.
            guard let number = clients.number(of: client) else { return }
            let key = TaskKey(client: number, requestID: requestID)
            // A call that asked to be kept is left, not cancelled: it becomes a job (or is
            // cancelled saying why it could not).
            switch keepAbandoned(key, answering: 0, now: now, into: &actions) {
            case .kept: return
            case .refused(let reason):
                cancel(
                    key, because: "its caller left it and it could not be kept as a job (\(reason)); it was cancelled",
                    into: &actions)
            case .notAsked: cancel(key, into: &actions)
            }
        }
    }

    /// The shell could not deliver a message to a client (it is gone, or its queue is full);
    /// `frames`: the message after the routing id. A kept call's reply makes its call a job
    /// ended with it.
    package mutating func clientUnreachable(
        _ client: PeerID, frames: Frames = Frames([]), now: Instant, into actions: inout [BrokerAction]
    ) {
        counters.undeliverableReplies += 1
        if configuration.logsDebug {
            actions.append(.log(.debug, "reply dropped: client unreachable", ["peer": "\(client)"]))
        }
        keepUndelivered(client, frames: frames, now: now, into: &actions)
    }

    /// A worker's message on the clients port: answered (rate-limited) with REFUSED naming the
    /// workers endpoint, so the worker stops and says why instead of retrying forever.
    private mutating func misdirected(worker peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        counters.misdirectedMessages += 1
        guard refusals.admit(.clients, now: now).allowed else { return }
        let reason =
            "this is the broker's clients endpoint (\(configuration.clientsEndpoint)); workers connect to \(configuration.workersEndpoint)"
        actions.append(.sendRaw(.clients, peer, BrokerToWorker.refused(reason: reason).encode()))
        actions.append(
            .log(
                .warning, "a worker connected to the clients port; told it which to use",
                ["workers": configuration.workersEndpoint]))
    }

    /// Takes a REQUEST; `packed`: it came packed, and so will the replies to this client.
    private mutating func accept(
        _ request: consuming TaskRequest, from peer: PeerID, packed: Bool, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        if BrokerService.isReserved(request.service) {
            if !answerJobService(request, for: peer, now: now, into: &actions) {
                answerBrokerService(request, for: peer, now: now, into: &actions)
            }
            return
        }
        if stopping {
            replyTo(
                peer,
                .failure(
                    request.requestID, .brokerShuttingDown,
                    message: "the broker is shutting down", attempt: request.header.attempt), into: &actions)
            return
        }
        if request.header.keepIfAbandoned, !jobs.configuration.journal {
            replyTo(
                peer,
                .failure(
                    request.requestID, .journalUnavailable,
                    message:
                        "this broker keeps no journal, so it cannot keep a call its caller leaves: start skybroker with --state-dir, or call without keepIfAbandoned",
                    attempt: request.header.attempt), into: &actions)
            return
        }
        if request.header.keepIfAbandoned, let conflict = keptIDConflict(request.requestID, from: peer) {
            replyTo(
                peer,
                .failure(
                    request.requestID, .invalidPayload, type: RemoteErrorBody.idInUseType, message: conflict,
                    attempt: request.header.attempt), into: &actions)
            return
        }
        // A service limited per key by a payload's field: its key is read once, here.
        if request.concurrencyKey == nil, let given = keyFromPayload(request.service, request.body) {
            switch given {
            case .success(let key):
                request.concurrencyKey = key
            case .failure(let problem):
                replyTo(
                    peer,
                    .failure(
                        request.requestID, .invalidPayload, type: RemoteErrorBody.keyMissingType,
                        message: problem.message, attempt: request.header.attempt),
                    into: &actions)
                return
            }
        }
        let client = retainClient(peer)
        let key = TaskKey(client: client, requestID: request.requestID)
        if tasks[key] != nil {
            // A retry of a request that is still being handled: its one reply is coming, and
            // will name the newest attempt, which is the one the client now waits for.
            counters.duplicateRequests += 1
            supersede(key, attempt: request.header.attempt)
            releaseClient(client)
            return
        }
        withClient(client) { record in
            record.outstanding += 1
            record.packed = packed
        }
        if request.header.keepIfAbandoned { indexKeptCall(request.requestID, from: client) }
        // The service's name is looked up here, once; the rest goes by its number.
        let service = services.number(for: request.service, limit: waitingServicesLimit)
        // Read before the request moves into its queue entry: read after, it was copied in
        // (its references counted up) and destroyed here.
        let arrival = queue.nextArrival(priority: request.header.priority) | UInt64(service ?? ServiceBook.none)
        let task = QueuedRequest(client: client, request: consume request, arrival: arrival, arrivedAt: ticks(now))
        guard let service else {
            counters.rejectedOverloaded += 1
            fail(
                task, .overloaded, "the broker knows \(waitingServicesLimit) services already, its limit",
                into: &actions)
            return
        }
        // A worker with a free credit means nothing of this service is waiting (the broker hands
        // queued work to every credit that frees up), so going straight to it keeps FIFO order;
        // and while requests of it wait, no worker of it has a credit to look for.
        // A limited service's call goes only with a token; without one it waits for the next
        // (or is answered at once if the calls ahead would take them past its deadline).
        // A call with a concurrency limit goes only while its key has room.
        // A call of a service limited per key goes only with its key's token.
        let limited = !services.limits.isEmpty && services[service].bucket != nil
        let keySlot = jobs.book.keyRates.isEmpty ? nil : jobs.book.keyRates.slot(of: task.request.service)
        let placeLimit = task.request.concurrencyLimit
        if queue.count(of: service) == 0, services.paused.isEmpty || !services[service].paused,
            placeLimit == 0 || queue.mayStart(service, key: task.request.concurrencyKey ?? "", limit: placeLimit),
            let worker = bestWorker(for: service, avoiding: key),
            !limited || hasStart(service, now: task.arrivedAt),
            keySlot == nil || jobs.book.keyRates.check(keySlot!, task.request.concurrencyKey ?? "", taking: true)
        {
            if limited { _ = takeStart(service, now: task.arrivedAt) }
            counters.requestsAccepted += 1
            if placeLimit > 0 { queue.placeDirectly(service, key: task.request.concurrencyKey ?? "") }
            dispatch(consume task, to: worker, now: now, key: key, into: &actions)
            return
        }
        if limited || keySlot != nil, !services[service].paused,
            let refusal = rateRefusal(task, service, keySlot: keySlot, now: task.arrivedAt)
        {
            fail(task, .overloaded, refusal.message, error: refusal, into: &actions)
            return
        }
        if let refusal = queueRefusal(for: task, into: &actions) {
            fail(task, .overloaded, refusal, into: &actions)
            return
        }
        // Moved on (`consume`): passed as it is, the request was copied and this one destroyed.
        enqueue(consume task, now: now, key: key)
        counters.requestsAccepted += 1
        // Requests wait in turns, some of a key at its limit: a worker may have a free credit
        // for this one.
        if queue.takesTurns(service) {
            for peer in services[service].workers { fill(peer, now: now, into: &actions) }
        }
    }

    /// Why a new request may not wait, if it may not: a full queue (in count or bytes), or a
    /// client that holds its share of it already. A client under its fair share of a full
    /// queue takes the place of another's newest request (``makeRoom(for:of:bytes:into:)``).
    private mutating func queueRefusal(for task: QueuedRequest, into actions: inout [BrokerAction]) -> String? {
        let bytes = task.request.queuedSize
        guard let waiting = clients.waiting(task.client) else { return nil }
        if queue.count >= configuration.queueLimit || queue.bytes + bytes > configuration.queueBytesLimit,
            let record = clients.record(task.client)
        {
            makeRoom(for: task, of: record, bytes: bytes, into: &actions)
        }
        if queue.count >= configuration.queueLimit {
            counters.rejectedOverloaded += 1
            return
                "the broker's queue holds \(configuration.queueLimit) requests, its limit (--queue-limit): retry later, or add workers; its operator can raise the limit, lower --client-queue-share, or shorten --max-wait (what clients that went away left waits up to it)"
        }
        if queue.bytes + bytes > configuration.queueBytesLimit {
            counters.rejectedQueueBytes += 1
            return
                "the broker's queue holds \(queue.bytes) bytes of requests and this one has \(bytes); the limit is \(configuration.queueBytesLimit) (--queue-bytes)"
        }
        // Making room takes only other clients' requests: this one's share is as read above.
        if waiting.count >= configuration.clientQueueLimit
            || waiting.bytes + bytes > configuration.clientQueueBytesLimit
        {
            counters.rejectedClientShare += 1
            return
                "this client already has \(waiting.count) requests (\(waiting.bytes) bytes) waiting, its share of the broker's queue (--client-queue-share \(configuration.clientQueueShare))"
        }
        return nil
    }

    /// The queue is full and `task`'s client holds less than its fair share of it (the limit
    /// split evenly among the clients with requests waiting, itself counted): the newest
    /// waiting requests of the client that holds the most, if that is more than its fair share,
    /// give way (a few at most, until `task` fits), each answered `overloaded` saying why.
    /// Clients that filled the queue at their shares (two at 0.5), or went away leaving their
    /// requests, refused every other client until their requests expired.
    private mutating func makeRoom(
        for task: QueuedRequest, of record: ClientRecord, bytes: Int, into actions: inout [BrokerAction]
    ) {
        let holders = clients.waitingHolders()
        let sharing = max(1, holders.count + (record.waiting == 0 ? 1 : 0))
        let fairCount = configuration.queueLimit / sharing
        let fairBytes = configuration.queueBytesLimit / sharing
        guard record.waiting < fairCount, record.waitingBytes + bytes <= fairBytes,
            let most = holders.most, most.number != task.client,
            let holder = clients.record(most.number), holder.waiting > fairCount || holder.waitingBytes > fairBytes
        else { return }
        var given = 0
        while given < Self.mostGivingWay,
            queue.count >= configuration.queueLimit || queue.bytes + bytes > configuration.queueBytesLimit,
            let arrival = queue.newestWaiting(of: most.number, lookingAt: Self.givingWayLook),
            let victim = waitingRequest(arrival: arrival)
        {
            given += 1
            dropWaiting(victim.key, arrival: arrival)
            counters.rejectedClientShare += 1
            fail(
                victim, .overloaded,
                "the broker's queue was full and this client held more than its share of it (\(most.waiting) of \(configuration.queueLimit) waiting, \(sharing) clients sharing): this request, its newest, gave its place to another client's; retry later",
                into: &actions)
        }
    }

    /// Requests that give way for one new request, at most, and entries looked at for each.
    static let mostGivingWay = 16
    static let givingWayLook = 4096

    /// Records a retry's attempt number on the request it repeats, so that its reply answers it.
    private mutating func supersede(_ key: TaskKey, attempt: UInt32) {
        switch tasks[key]?.kind {
        case .running(let tag)?:
            deliveries.update(tag) { held in
                held.task.request.header.attempt = max(held.task.request.header.attempt, attempt)
            }
        case .waiting(let arrival)?:
            updateWaitingRequest(arrival: arrival) { queued in
                queued.request.header.attempt = max(queued.request.header.attempt, attempt)
            }
        case nil:
            break
        }
    }

    /// Answers a CANCEL. The reply carries attempt 0: it answers the CANCEL, not an attempt.
    /// A running delivery is cancelled at its worker, which keeps its credit until it replies;
    /// the request itself is done, so a retry with the same id is a new request.
    private mutating func cancel(
        _ key: TaskKey, because message: String = "cancelled by the client", into actions: inout [BrokerAction]
    ) {
        var stillHeld = false
        switch tasks[key]?.kind {
        case .waiting(let arrival)?:
            dropWaiting(key, arrival: arrival)
            // Counted once, as its client is answered (so is a running one: its worker's late
            // reply only returns the credit).
            recordWindow(of: ServiceBook.Number(arrival & Self.slotMask)) { $0.recordFailure(.cancelled) }
        case .running(let tag)?:
            tasks[key] = nil
            if let service = deliveries[tag]?.task.service {
                recordWindow(of: service) { $0.recordFailure(.cancelled) }
            }
            cancelAtWorker(key, tag: tag, into: &actions)
            stillHeld = true
        case nil:
            return
        }
        counters.cancelled += 1
        reply(
            to: key.client,
            .failure(key.requestID, .cancelled, message: message, attempt: 0),
            into: &actions)
        // A delivery its worker still holds keeps the client's number until it comes back
        // (``releaseCancelledDelivery(_:at:)``).
        if !stillHeld { finishRequest(key.client) }
    }

    /// Tells the worker holding a delivery to cancel it, which it keeps (and its credit) until
    /// the worker answers; retries of the request avoid that worker while it can. The request
    /// is taken out of ``tasks`` by the caller.
    mutating func cancelAtWorker(_ key: TaskKey, tag: UInt64, into actions: inout [BrokerAction]) {
        guard let peer = deliveries.worker(of: tag) else { return }
        deliveries.update(tag) { $0.answered = true }
        withWorker(peer) { _ = $0.cancelledKeys.insert(key) }
        actions.append(.sendToWorker(peer, .cancel(tag: DeliveryTag(number: tag), key.requestID)))
    }

    // MARK: Client records

    /// The number of a client, registering it if new, with one more reference.
    mutating func retainClient(_ peer: PeerID) -> ClientNumber { clients.number(for: peer) }

    /// Forgets a client that has nothing outstanding.
    mutating func releaseClient(_ number: ClientNumber) {
        guard let record = clients.record(number), record.outstanding == 0 else { return }
        clients.remove(number)
    }

    /// A cancelled delivery left its worker (answered late, taken by its lease, or the worker
    /// left): the worker stops avoiding retries of it, and the client may be forgotten.
    mutating func releaseCancelledDelivery(_ key: TaskKey, at peer: PeerID) {
        workers[peer]?.cancelledKeys.remove(key)
        finishRequest(key.client)
    }

    /// A request of the client was answered.
    mutating func finishRequest(_ number: ClientNumber) {
        let left = withClient(number) { record in
            record.outstanding -= 1
            return record.outstanding
        }
        if left == 0 { clients.remove(number) }
    }

    // MARK: Time

    /// `now` as nanoseconds after the machine's epoch (the first instant it converts).
    mutating func ticks(_ now: Instant) -> Int64 {
        guard let epoch else {
            epoch = now
            return 0
        }
        return now.nanoseconds(since: epoch)
    }

    /// `duration` in nanoseconds (``MonotonicInstant/nanoseconds(_:)``).
    @inline(__always) static func nanoseconds(_ duration: Duration) -> Int64 {
        MonotonicInstant.nanoseconds(duration)
    }

    // MARK: Replies and events

    mutating func reply(to client: ClientNumber, _ reply: consuming TaskReply, into actions: inout [BrokerAction]) {
        if client == Self.jobsClient {
            jobAttemptEnded(reply, into: &actions)
            return
        }
        if !keptCalls.isEmpty { keptCallAnswered(client, reply, into: &actions) }
        guard let record = clients.record(client) else { return }
        replyTo(record.peer, consume reply, packed: record.packed, into: &actions)
    }

    /// Answers a client: packed for a client whose REQUESTs come packed, framed for all others
    /// (and for the broker's own services, which are rare: a client that sends packed REQUESTs
    /// takes both forms).
    mutating func replyTo(
        _ peer: PeerID, _ reply: consuming TaskReply, packed: Bool = false, into actions: inout [BrokerAction]
    ) {
        counters.repliesSent += 1
        if packed {
            actions.append(.sendToClient(peer, .packedReply(consume reply)))
        } else {
            actions.append(.sendToClient(peer, .reply(consume reply)))
        }
    }

    /// Answers a request with a failure the broker made, says so on the event socket, and
    /// forgets the request.
    /// - Parameter error: the failure's body, if not of type `status` with `message`.
    mutating func fail(
        _ task: QueuedRequest, _ status: ReplyStatus, _ message: String, error: RemoteErrorBody? = nil,
        worker: PeerID? = nil, keepsClient: Bool = false, into actions: inout [BrokerAction]
    ) {
        if status != .brokerShuttingDown {
            recordWindow(of: task.service) { $0.recordFailure(status) }
            sampleFailure(
                task, status, error ?? RemoteErrorBody(type: status.description, message: message),
                worker: worker.flatMap { workers[$0]?.name })
        }
        reply(
            to: task.client,
            error.map {
                TaskReply(
                    requestID: task.request.requestID, attempt: task.request.header.attempt, status: status,
                    body: $0.encoded())
            }
                ?? .failure(
                    task.request.requestID, status, type: status.description, message: message,
                    attempt: task.request.header.attempt),
            into: &actions)
        publishTask(
            .taskFailed,
            TaskInfo(
                requestID: task.request.requestID.description, service: task.request.service,
                deliveries: Int(task.deliveries), worker: worker?.description, status: status.description),
            into: &actions)
        // A delivery its worker still holds keeps the client's number until it comes back
        // (``releaseCancelledDelivery(_:at:)``).
        if !keepsClient { finishRequest(task.client) }
    }

    /// Keeps a failure for the next `broker.stats`, if the period has room for it; the error
    /// is taken apart only then, so a storm of failures costs no more than a few samples.
    mutating func sampleFailure(
        _ task: QueuedRequest, _ status: ReplyStatus, _ error: @autoclosure () -> RemoteErrorBody, worker: String?
    ) {
        guard tally.samplesFailures else { return }
        let error = error()
        tally.sample(
            TaskFailure(
                requestID: task.request.requestID.description, service: task.request.service,
                status: status.description, type: error.type, message: error.message, worker: worker))
    }

    mutating func publish(_ event: SkyEvent, into actions: inout [BrokerAction]) {
        var event = event
        event.seq = events.number()
        actions.append(.publish(event))
    }

    /// Publishes a task or job event (one per message): built only if a subscription takes
    /// it, its strings included; its number is taken either way.
    mutating func publishTask(
        _ kind: EventKind, _ info: @autoclosure () -> TaskInfo, schedule: ScheduleTick? = nil,
        into actions: inout [BrokerAction]
    ) {
        guard events.isWatched(kind) else {
            _ = events.number()
            return
        }
        publish(SkyEvent(seq: 0, event: kind, time: "", task: info(), schedule: schedule), into: &actions)
    }

    /// A watcher subscribed to `topic` (the first for it), or the last one left it.
    package mutating func eventSubscription(_ topic: [UInt8], subscribed: Bool) {
        events.subscription(topic, subscribed: subscribed)
    }

    /// Someone subscribed to the event socket: greet them with the current state, which also
    /// tells them their subscription is live. Subscriptions that come faster than
    /// ``Configuration/helloInterval`` share one greeting, sent when the interval has passed.
    package mutating func subscriberJoined(now: Instant, into actions: inout [BrokerAction]) {
        if events.subscriberJoined(now: now) { sayHello(now: now, into: &actions) }
    }

    mutating func sayHello(now: Instant, into actions: inout [BrokerAction]) {
        events.greeted(now: now, interval: configuration.helloInterval)
        publish(
            SkyEvent(
                seq: 0, event: .brokerHello, time: "",
                workers: workers.values.sorted { $0.id.bytes.lexicographicallyPrecedes($1.id.bytes) }.map(\.info),
                queued: queuedCount, broker: configuration.instance, epoch: configuration.epoch),
            into: &actions)
    }

    /// The endpoints actually bound, named to peers that connect to the wrong one; the events
    /// endpoint is told to clients in `mmi.features`.
    package mutating func announce(clients: String, workers: String, events: String? = nil) {
        configuration.clientsEndpoint = clients
        configuration.workersEndpoint = workers
        configuration.eventsEndpoint = events
    }

    /// The shell measured an iteration of the event loop; the longest per stats period is
    /// published in `broker.stats`.
    package mutating func loopIteration(took duration: Duration) {
        tally.loopIteration(took: duration)
    }

    private mutating func answerBrokerService(
        _ request: TaskRequest, for client: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) {
        var answer: TaskReply
        switch request.service {
        case BrokerService.service:
            let served = isServed(String(decoding: request.body, as: UTF8.self))
            answer = TaskReply(requestID: request.requestID, status: .ok, body: Array((served ? "200" : "404").utf8))
        case BrokerService.workers:
            let body = (try? CanonicalJSON.encode(snapshot(now: now))) ?? Array("{}".utf8)
            answer = TaskReply(requestID: request.requestID, status: .ok, body: body)
        case BrokerService.servicePause, BrokerService.serviceResume, BrokerService.serviceList,
            BrokerService.serviceKeys:
            answerServiceControl(request, for: client, now: now, into: &actions)
            return
        case BrokerService.limitSet, BrokerService.limitRemove, BrokerService.limitList:
            answerLimitControl(request, for: client, now: now, into: &actions)
            return
        case BrokerService.features:
            let features = BrokerFeatures.broker(
                maxFrameSize: Int(configuration.maxFrameSize), journal: jobs.configuration.journal,
                eventsEndpoint: configuration.eventsEndpoint)
            answer = TaskReply(requestID: request.requestID, status: .ok, body: features.encode())
        default:
            answer = .failure(
                request.requestID, .unknownService,
                message: "501: the broker has no internal service \(request.service)")
        }
        answer.attempt = request.header.attempt
        replyTo(client, answer, into: &actions)
    }
}
