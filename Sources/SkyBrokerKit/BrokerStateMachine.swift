import DequeModule
import HeapModule
import SkyProtocol

/// The broker's logic, free of sockets, threads and clocks.
///
/// Inputs are messages from clients and workers (as frames, after the ROUTER's routing-id frame),
/// failed sends, subscriptions to the event socket, clock ticks and shutdown; every input carries
/// `now`, so time is injected and tests move it by hand. Each input appends ``BrokerAction``s for
/// the I/O shell to perform.
///
/// **Routing.** A request goes to a worker that serves its service and has a free credit: the
/// least loaded (outstanding ÷ capacity), then the one given work longest ago. Otherwise it waits
/// in a per-service FIFO queue (bounded: beyond ``Configuration/queueLimit`` it is refused as
/// `overloaded`); a worker that frees a credit or joins takes the oldest waiting request among
/// its services. Payloads are never decoded.
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
/// **Deadlines.** A request's `timeout-ms` sets its deadline. One still waiting at its deadline is
/// answered `deadlineExceeded` (`noWorkers` if no worker serves its service). One running past
/// deadline + ``Configuration/leaseGrace`` is taken from its worker (a lease), answered
/// `deadlineExceeded`, and the worker is told to cancel it.
public struct BrokerStateMachine: Sendable {
    public typealias Instant = ContinuousClock.Instant

    public struct Configuration: Sendable {
        /// How often the broker and workers exchange heartbeats.
        public var heartbeatInterval: Duration = .seconds(1)
        /// Missed intervals before a worker is declared dead.
        public var liveness: Int = 3
        /// Deliveries of one request before it fails with `workerLost`.
        public var maxDeliveries: Int = 3
        /// Requests that may wait for a worker.
        public var queueLimit: Int = 100_000
        /// How long past its deadline a task may run before it is taken from its worker.
        public var leaseGrace: Duration = .seconds(5)
        /// How often `broker.stats` is published.
        public var statsInterval: Duration = .seconds(1)
        /// Publish `task.dispatched` and `task.completed` for every task (costs throughput).
        public var taskEvents: Bool = false
        /// Measures the process's memory for snapshots; `nil` leaves it out (tests).
        public var memoryProbe: (@Sendable () -> ProcessMemory)?
        /// Names this run of the broker in greetings and snapshots.
        public var instance = RequestID.random().description

        public init() {}

        /// How long a worker may stay silent.
        public var expiry: Duration { heartbeatInterval * liveness }
    }

    /// A request the broker accepted and has not answered.
    struct QueuedRequest: Sendable {
        var client: PeerID
        var request: TaskRequest
        /// Arrival order over all services, so a worker serving several takes the oldest.
        var arrival: UInt64
        /// Nanoseconds after the machine's epoch (see ``BrokerStateMachine/ticks(_:)``);
        /// ``noDeadline`` for none. 8 bytes rather than an optional `Instant`'s 24: this struct
        /// exists once per waiting request.
        var deadline: Int64
        /// How many times it was handed to a worker.
        var deliveries: Int = 0

        static let noDeadline = Int64.max

        var key: TaskKey { TaskKey(client: client, requestID: request.requestID) }
    }

    /// Identifies a request: the client that sent it and its request id.
    struct TaskKey: Hashable, Sendable {
        var client: PeerID
        var requestID: RequestID
    }

    struct InFlightTask: Sendable {
        var task: QueuedRequest
        /// When the task is taken from the worker: deadline + grace.
        var leaseExpiry: Instant?
        /// Already answered (cancelled by its client): the worker's reply only returns the credit.
        var answered = false
    }

    struct WorkerRecord: Sendable {
        let id: PeerID
        var name: String
        var capacity: Int
        var services: [String]
        var inFlight: [TaskKey: InFlightTask] = [:]
        /// When it was last given a task (a dispatch counter), for round robin among equals.
        var lastDispatch: UInt64 = 0
        /// It said DRAINING: no new tasks.
        var draining = false
        /// The address it connected from, if the transport tells.
        var host: String?
        /// The authenticated key it registered with (CURVE), which owns the registration.
        var key: String?
        /// Replies it sent for tasks it held.
        var completed: UInt64 = 0
        /// When any message from it last arrived; it expires `expiry` later.
        var lastHeard: Instant

        var freeCredits: Int { draining ? 0 : capacity - inFlight.count }

        var info: WorkerInfo {
            WorkerInfo(id: id.description, name: name, capacity: capacity, services: services, host: host)
        }

        /// The info with its load, as snapshots and stats show it.
        func load(now: Instant) -> WorkerInfo {
            var info = info
            info.inFlight = inFlight.count
            info.completed = completed
            info.lastHeardMilliseconds = Int((now - lastHeard).wholeMilliseconds)
            return info
        }
    }

    /// A waiting request's deadline, ordered for the deadline heap. The request is found again by
    /// service and arrival (queues are sorted by arrival).
    struct DeadlineEntry: Comparable, Sendable {
        var deadline: Int64
        var arrival: UInt64
        var service: String

        static func < (lhs: Self, rhs: Self) -> Bool { lhs.deadline < rhs.deadline }
        static func == (lhs: Self, rhs: Self) -> Bool { lhs.deadline == rhs.deadline && lhs.arrival == rhs.arrival }
    }

    public let configuration: Configuration
    var workers: [PeerID: WorkerRecord] = [:]
    /// Workers per service, in registration order.
    var workersByService: [String: [PeerID]] = [:]
    /// Waiting requests per service, oldest first. May hold entries that were cancelled or expired
    /// meanwhile; ``waiting`` says which are live.
    var queues: [String: Deque<QueuedRequest>] = [:]
    /// Live waiting requests: request id → arrival number. Kept as small as possible, since it
    /// costs memory for every waiting request: keyed by the id alone (128 random bits; another
    /// client could match an entry only by guessing its id), and without the service, which
    /// the queues know.
    var waiting: [RequestID: UInt64] = [:]
    /// Requests at a worker, and which one.
    var running: [RequestID: PeerID] = [:]
    var deadlines = Heap<DeadlineEntry>()
    /// Queue entries whose request is no longer in ``waiting`` (see ``compactIfMostlyDead()``).
    var deadQueued = 0
    /// The first instant the machine saw; compact timestamps count from it.
    var epoch: Instant?
    var nextArrival: UInt64 = 0
    var dispatchCounter: UInt64 = 0
    var lastEventSeq: UInt64 = 0
    var nextHeartbeat: Instant?
    var nextStats: Instant?
    var completedAtLastStats: UInt64 = 0
    var stopping = false
    public internal(set) var counters = BrokerCounters()

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    // MARK: Queries

    /// Requests waiting for a worker.
    public var queuedCount: Int { waiting.count }

    /// Tasks outstanding at workers.
    public var inFlightCount: Int { running.count }

    public var workerCount: Int { workers.count }

    /// Entries in the queues and the deadline heap, live or not (for tests of their bounds).
    var bookkeepingEntries: (queued: Int, deadlines: Int) {
        (queues.values.reduce(0) { $0 + $1.count }, deadlines.count)
    }

    /// Live waiting requests per service. Counts the queues, so it costs a pass over them: for
    /// snapshots, not for every request.
    func queuedPerService() -> [String: Int] {
        var counts: [String: Int] = [:]
        for (service, queue) in queues {
            let live = queue.reduce(0) { $0 + (waiting[$1.request.requestID] == $1.arrival ? 1 : 0) }
            if live > 0 { counts[service] = live }
        }
        return counts
    }

    /// The current view, as answered to `mmi.workers`.
    public func snapshot(now: Instant) -> ClusterSnapshot {
        let list = workerLoads(now: now)
        return ClusterSnapshot(
            seq: lastEventSeq, workers: list, queued: queuedPerService(),
            inFlight: inFlightCount, counters: counters, memory: configuration.memoryProbe?(),
            broker: configuration.instance)
    }

    /// Every worker with its load, in a stable order.
    func workerLoads(now: Instant) -> [WorkerInfo] {
        workers.values.sorted { $0.id.bytes.lexicographicallyPrecedes($1.id.bytes) }.map { $0.load(now: now) }
    }

    // MARK: Clients

    /// A message arrived on the clients ROUTER from `client`.
    public mutating func clientMessage(
        from client: PeerID, frames: [[UInt8]], now: Instant, into actions: inout [BrokerAction]
    ) {
        let command: ClientToBroker
        do {
            command = try ClientToBroker.decode(frames)
        } catch {
            counters.malformedClientMessages += 1
            actions.append(.log(.warning, "dropped malformed message from client \(client): \(error)"))
            return
        }
        switch command {
        case .request(let request):
            accept(request, from: client, now: now, into: &actions)
        case .cancel(let requestID):
            cancel(TaskKey(client: client, requestID: requestID), into: &actions)
        }
    }

    /// The shell could not deliver a message to a client (it is gone, or its queue is full).
    public mutating func clientUnreachable(_ client: PeerID, into actions: inout [BrokerAction]) {
        counters.undeliverableReplies += 1
        actions.append(.log(.debug, "reply to client \(client) dropped: client unreachable"))
    }

    private mutating func accept(
        _ request: TaskRequest, from client: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) {
        if request.service.hasPrefix(BrokerService.prefix) {
            answerBrokerService(request, for: client, now: now, into: &actions)
            return
        }
        if stopping {
            reply(
                to: client,
                .failure(
                    request.requestID, .brokerShuttingDown, type: "brokerShuttingDown",
                    message: "the broker is shutting down", attempt: request.header.attempt), into: &actions)
            return
        }
        let key = TaskKey(client: client, requestID: request.requestID)
        if waiting[key.requestID] != nil || running[key.requestID] != nil {
            // A retry of a request that is still being handled: its one reply is coming, and
            // will name the newest attempt, which is the one the client now waits for.
            counters.duplicateRequests += 1
            supersede(key, service: request.service, attempt: request.header.attempt)
            return
        }
        nextArrival += 1
        let deadline =
            request.header.timeoutMilliseconds > 0
            ? ticks(now) + Int64(request.header.timeoutMilliseconds) * 1_000_000 : QueuedRequest.noDeadline
        let task = QueuedRequest(client: client, request: request, arrival: nextArrival, deadline: deadline)
        // A worker with a free credit means nothing of this service is waiting (the broker hands
        // queued work to every credit that frees up), so going straight to it keeps FIFO order.
        if let worker = bestWorker(for: request.service) {
            counters.requestsAccepted += 1
            dispatch(task, to: worker, now: now, into: &actions)
            return
        }
        guard waiting.count < configuration.queueLimit else {
            counters.rejectedOverloaded += 1
            fail(
                task, .overloaded,
                "the broker's queue holds \(configuration.queueLimit) requests, its limit", into: &actions)
            return
        }
        counters.requestsAccepted += 1
        enqueue(task, atFront: false)
    }

    /// Records a retry's attempt number on the request it repeats, so that its reply answers it.
    private mutating func supersede(_ key: TaskKey, service: String, attempt: UInt32) {
        if let peer = running[key.requestID], var task = workers[peer]?.inFlight[key] {
            task.task.request.header.attempt = max(task.task.request.header.attempt, attempt)
            workers[peer]?.inFlight[key] = task
        } else if let arrival = waiting[key.requestID] {
            updateWaitingRequest(service, arrival: arrival) { queued in
                guard queued.client == key.client else { return }
                queued.request.header.attempt = max(queued.request.header.attempt, attempt)
            }
        }
    }

    /// Answers a CANCEL. The reply carries attempt 0: it answers the CANCEL, not an attempt.
    private mutating func cancel(_ key: TaskKey, into actions: inout [BrokerAction]) {
        if waiting.removeValue(forKey: key.requestID) != nil {
            deadQueued += 1
            counters.cancelled += 1
            reply(
                to: key.client,
                .failure(key.requestID, .cancelled, type: "cancelled", message: "cancelled by the client", attempt: 0),
                into: &actions)
        } else if let peer = running[key.requestID], var task = workers[peer]?.inFlight[key], !task.answered {
            task.answered = true
            workers[peer]?.inFlight[key] = task
            counters.cancelled += 1
            actions.append(.sendToWorker(peer, .cancel(client: key.client.bytes, key.requestID)))
            reply(
                to: key.client,
                .failure(key.requestID, .cancelled, type: "cancelled", message: "cancelled by the client", attempt: 0),
                into: &actions)
        }
    }

    // MARK: Time

    /// `now` as nanoseconds after the machine's epoch (the first instant it converts).
    mutating func ticks(_ now: Instant) -> Int64 {
        let epoch = self.epoch ?? now
        self.epoch = epoch
        let (seconds, attoseconds) = (now - epoch).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    /// The instant of a compact timestamp.
    func instant(_ ticks: Int64) -> Instant {
        (epoch ?? .now) + .nanoseconds(ticks)
    }

    // MARK: Replies and events

    mutating func reply(to client: PeerID, _ reply: TaskReply, into actions: inout [BrokerAction]) {
        counters.repliesSent += 1
        actions.append(.sendToClient(client, .reply(reply)))
    }

    /// Answers a request with a failure the broker made, and says so on the event socket.
    mutating func fail(
        _ task: QueuedRequest, _ status: ReplyStatus, _ message: String, worker: PeerID? = nil,
        into actions: inout [BrokerAction]
    ) {
        reply(
            to: task.client,
            .failure(
                task.request.requestID, status, type: status.description, message: message,
                attempt: task.request.header.attempt),
            into: &actions)
        publish(
            SkyEvent(
                seq: 0, event: .taskFailed, time: "",
                task: TaskInfo(
                    requestID: task.request.requestID.description, service: task.request.service,
                    deliveries: task.deliveries, worker: worker?.description, status: status.description)),
            into: &actions)
    }

    mutating func publish(_ event: SkyEvent, into actions: inout [BrokerAction]) {
        lastEventSeq += 1
        var event = event
        event.seq = lastEventSeq
        actions.append(.publish(event))
    }

    /// Someone subscribed to the event socket: greet them with the current state, which also
    /// tells them their subscription is live.
    public mutating func subscriberJoined(into actions: inout [BrokerAction]) {
        publish(
            SkyEvent(
                seq: 0, event: .brokerHello, time: "",
                workers: workers.values.sorted { $0.id.bytes.lexicographicallyPrecedes($1.id.bytes) }.map(\.info),
                queued: queuedCount, broker: configuration.instance),
            into: &actions)
    }

    private mutating func answerBrokerService(
        _ request: TaskRequest, for client: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) {
        var answer: TaskReply
        switch request.service {
        case BrokerService.service:
            let name = String(decoding: request.body, as: UTF8.self)
            let served = workersByService[name]?.isEmpty == false
            answer = TaskReply(requestID: request.requestID, status: .ok, body: Array((served ? "200" : "404").utf8))
        case BrokerService.workers:
            let body = (try? CanonicalJSON.encode(snapshot(now: now))) ?? Array("{}".utf8)
            answer = TaskReply(requestID: request.requestID, status: .ok, body: body)
        default:
            answer = .failure(
                request.requestID, .unknownService, type: "unknownService",
                message: "501: the broker has no internal service \(request.service)")
        }
        answer.attempt = request.header.attempt
        reply(to: client, answer, into: &actions)
    }
}
