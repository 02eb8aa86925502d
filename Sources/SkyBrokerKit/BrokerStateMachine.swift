import DequeModule
import SkyProtocol

/// The broker's logic, free of sockets and threads.
///
/// Inputs are messages from clients and workers (as frames, after the ROUTER's routing-id frame),
/// failed sends, and subscriptions to the event socket; each input appends ``BrokerAction``s for
/// the I/O shell to perform. Nothing here blocks, sleeps or reads a clock, so every transition can
/// be tested as values.
///
/// Routing: a request goes to a worker that serves its service and has a free credit, choosing
/// the least loaded (outstanding ÷ capacity), then the one that was given work longest ago.
/// When no such worker exists the request waits in a per-service FIFO queue; whenever a worker
/// frees a credit or joins it takes the oldest waiting request among the services it serves.
/// The broker never decodes task payloads.
public struct BrokerStateMachine: Sendable {
    /// A request waiting for a worker.
    struct QueuedRequest: Sendable {
        var client: PeerID
        var request: TaskRequest
        /// Arrival order over all services, so a worker serving several services takes the oldest.
        var arrival: UInt64
    }

    /// Identifies a task at a worker: the client that asked and its request id.
    struct TaskKey: Hashable, Sendable {
        var client: PeerID
        var requestID: RequestID
    }

    struct WorkerRecord: Sendable {
        let id: PeerID
        var name: String
        var capacity: Int
        var services: [String]
        /// Tasks outstanding at this worker, with what is needed to queue them again.
        var inFlight: [TaskKey: QueuedRequest] = [:]
        /// When it was last given a task (a dispatch counter), for round-robin among equals.
        var lastDispatch: UInt64 = 0

        var freeCredits: Int { capacity - inFlight.count }

        var info: WorkerInfo {
            WorkerInfo(id: id.description, name: name, capacity: capacity, services: services)
        }
    }

    private var workers: [PeerID: WorkerRecord] = [:]
    /// Workers per service, in registration order.
    private var workersByService: [String: [PeerID]] = [:]
    private var queues: [String: Deque<QueuedRequest>] = [:]
    private var nextArrival: UInt64 = 0
    private var dispatchCounter: UInt64 = 0
    private var lastEventSeq: UInt64 = 0
    public private(set) var counters = BrokerCounters()

    public init() {}

    // MARK: Queries

    /// Requests waiting over all services.
    public var queuedCount: Int { queues.values.reduce(0) { $0 + $1.count } }

    /// Tasks outstanding at workers.
    public var inFlightCount: Int { workers.values.reduce(0) { $0 + $1.inFlight.count } }

    public var workerCount: Int { workers.count }

    /// The current view, as answered to `mmi.workers`.
    public func snapshot() -> ClusterSnapshot {
        let list = workers.values.sorted { $0.id.bytes.lexicographicallyPrecedes($1.id.bytes) }.map {
            var info = $0.info
            info.inFlight = $0.inFlight.count
            return info
        }
        return ClusterSnapshot(
            seq: lastEventSeq, workers: list, queued: queues.filter { !$0.value.isEmpty }.mapValues(\.count),
            inFlight: inFlightCount, counters: counters)
    }

    // MARK: Inputs

    /// A message arrived on the clients ROUTER from `client`.
    public mutating func clientMessage(from client: PeerID, frames: [[UInt8]], into actions: inout [BrokerAction]) {
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
            if request.service.hasPrefix(BrokerService.prefix) {
                answerBrokerService(request, for: client, into: &actions)
                return
            }
            counters.requestsAccepted += 1
            nextArrival += 1
            let queued = QueuedRequest(client: client, request: request, arrival: nextArrival)
            if queues[request.service]?.isEmpty ?? true, let worker = bestWorker(for: request.service) {
                dispatch(queued, to: worker, into: &actions)
            } else {
                queues[request.service, default: []].append(queued)
            }
        }
    }

    /// A message arrived on the workers ROUTER from `peer`.
    public mutating func workerMessage(from peer: PeerID, frames: [[UInt8]], into actions: inout [BrokerAction]) {
        let command: WorkerToBroker
        do {
            command = try WorkerToBroker.decode(frames)
        } catch {
            counters.malformedWorkerMessages += 1
            actions.append(.log(.warning, "dropped malformed message from worker \(peer): \(error)"))
            return
        }
        switch command {
        case .ready(let announcement):
            register(peer, announcement, into: &actions)
        case .reply(let client, let reply):
            guard workers[peer] != nil else {
                rejectUnknownWorker(peer, command: "REPLY", into: &actions)
                return
            }
            completeTask(at: peer, client: PeerID(client), reply: reply, into: &actions)
        case .heartbeat:
            if workers[peer] == nil { rejectUnknownWorker(peer, command: "HEARTBEAT", into: &actions) }
        case .disconnect:
            if workers[peer] != nil { remove(peer, reason: .graceful, into: &actions) }
        }
    }

    /// The shell could not deliver a message to a client (it is gone, or its queue is full).
    public mutating func clientUnreachable(_ client: PeerID, into actions: inout [BrokerAction]) {
        counters.undeliverableReplies += 1
        actions.append(.log(.debug, "reply to client \(client) dropped: client unreachable"))
    }

    /// The shell could not deliver a message to a worker: its connection is gone.
    public mutating func workerUnreachable(_ peer: PeerID, into actions: inout [BrokerAction]) {
        guard workers[peer] != nil else { return }
        remove(peer, reason: .unreachable, into: &actions)
    }

    /// Someone subscribed to the event socket: greet them with the current state, which also
    /// tells them their subscription is live.
    public mutating func subscriberJoined(into actions: inout [BrokerAction]) {
        let list = snapshot().workers
        publish(
            SkyEvent(seq: 0, event: .brokerHello, time: "", workers: list, queued: queuedCount), into: &actions)
    }

    // MARK: Workers

    private mutating func register(
        _ peer: PeerID, _ announcement: WorkerAnnouncement, into actions: inout [BrokerAction]
    ) {
        if workers[peer] != nil {
            actions.append(.log(.warning, "worker \(peer) sent a second READY; disconnecting it"))
            remove(peer, reason: .protocolError, into: &actions)
            actions.append(.sendToWorker(peer, .disconnect))
            return
        }
        if let reserved = announcement.services.first(where: { $0.hasPrefix(BrokerService.prefix) }) {
            counters.malformedWorkerMessages += 1
            actions.append(
                .log(.warning, "worker \(peer) tried to register reserved service \(reserved); disconnecting it"))
            actions.append(.sendToWorker(peer, .disconnect))
            return
        }
        var services: [String] = []
        for service in announcement.services where !services.contains(service) { services.append(service) }
        let record = WorkerRecord(
            id: peer, name: announcement.name, capacity: Int(announcement.capacity), services: services)
        workers[peer] = record
        for service in services { workersByService[service, default: []].append(peer) }
        actions.append(
            .log(
                .info,
                "worker \(announcement.name) (\(peer)) connected: capacity \(record.capacity), services \(services.joined(separator: ", "))"
            ))
        publish(SkyEvent(seq: 0, event: .workerConnected, time: "", worker: record.info), into: &actions)
        fill(peer, into: &actions)
    }

    private mutating func remove(_ peer: PeerID, reason: DisconnectReason, into actions: inout [BrokerAction]) {
        guard let record = workers.removeValue(forKey: peer) else { return }
        for service in record.services {
            workersByService[service]?.removeAll { $0 == peer }
            if workersByService[service]?.isEmpty == true { workersByService[service] = nil }
        }
        // Back to the front of their queues, oldest first, so they run before newer work.
        let held = record.inFlight.values.sorted { $0.arrival > $1.arrival }
        for task in held { queues[task.request.service, default: []].prepend(task) }
        counters.requeued += UInt64(held.count)
        actions.append(
            .log(
                .info,
                "worker \(record.name) (\(peer)) disconnected (\(reason.rawValue)); \(held.count) task(s) requeued"))
        publish(
            SkyEvent(
                seq: 0, event: .workerDisconnected, time: "", worker: record.info, reason: reason, tasksHeld: held.count
            ),
            into: &actions)
        let services = Set(held.map(\.request.service))
        for service in services {
            for candidate in workersByService[service] ?? [] { fill(candidate, into: &actions) }
        }
    }

    private mutating func rejectUnknownWorker(_ peer: PeerID, command: String, into actions: inout [BrokerAction]) {
        counters.unknownWorkerMessages += 1
        actions.append(.log(.warning, "\(command) from unregistered worker \(peer); telling it to re-register"))
        actions.append(.sendToWorker(peer, .disconnect))
    }

    // MARK: Tasks

    private mutating func completeTask(
        at peer: PeerID, client: PeerID, reply: TaskReply, into actions: inout [BrokerAction]
    ) {
        let key = TaskKey(client: client, requestID: reply.requestID)
        guard workers[peer]?.inFlight.removeValue(forKey: key) != nil else {
            counters.unexpectedReplies += 1
            actions.append(
                .log(.warning, "dropped reply for \(reply.requestID) from worker \(peer): it does not hold that task"))
            return
        }
        counters.repliesSent += 1
        actions.append(.sendToClient(client, .reply(reply)))
        fill(peer, into: &actions)
    }

    /// The worker to give a new task of `service`: a free credit, least loaded, least recently used.
    private func bestWorker(for service: String) -> PeerID? {
        var best: WorkerRecord?
        for peer in workersByService[service] ?? [] {
            guard let candidate = workers[peer], candidate.freeCredits > 0 else { continue }
            guard let current = best else {
                best = candidate
                continue
            }
            // Compare load ratios without division: a/b < c/d  ⇔  a·d < c·b.
            let lhs = candidate.inFlight.count * current.capacity
            let rhs = current.inFlight.count * candidate.capacity
            if lhs < rhs || (lhs == rhs && candidate.lastDispatch < current.lastDispatch) {
                best = candidate
            }
        }
        return best?.id
    }

    private mutating func dispatch(_ task: QueuedRequest, to peer: PeerID, into actions: inout [BrokerAction]) {
        dispatchCounter += 1
        let key = TaskKey(client: task.client, requestID: task.request.requestID)
        workers[peer]?.inFlight[key] = task
        workers[peer]?.lastDispatch = dispatchCounter
        actions.append(.sendToWorker(peer, .request(client: task.client.bytes, task.request)))
    }

    /// Gives a worker queued work until its credits are used up or nothing it serves is waiting.
    private mutating func fill(_ peer: PeerID, into actions: inout [BrokerAction]) {
        guard let record = workers[peer] else { return }
        var free = record.freeCredits
        while free > 0 {
            var oldest: (service: String, arrival: UInt64)?
            for service in record.services {
                guard let head = queues[service]?.first else { continue }
                if oldest == nil || head.arrival < oldest!.arrival { oldest = (service, head.arrival) }
            }
            guard let pick = oldest, let task = queues[pick.service]?.popFirst() else { return }
            if queues[pick.service]?.isEmpty == true { queues[pick.service] = nil }
            dispatch(task, to: peer, into: &actions)
            free -= 1
        }
    }

    // MARK: Broker services and events

    private mutating func answerBrokerService(
        _ request: TaskRequest, for client: PeerID, into actions: inout [BrokerAction]
    ) {
        let reply: TaskReply
        switch request.service {
        case BrokerService.service:
            let name = String(decoding: request.body, as: UTF8.self)
            let served = workersByService[name]?.isEmpty == false
            reply = TaskReply(requestID: request.requestID, status: .ok, body: Array((served ? "200" : "404").utf8))
        case BrokerService.workers:
            reply = TaskReply(requestID: request.requestID, status: .ok, body: Array(JSONCoding.encode(snapshot())))
        default:
            reply = .failure(
                request.requestID, .unknownService, type: "unknownService",
                message: "501: the broker has no internal service \(request.service)")
        }
        counters.repliesSent += 1
        actions.append(.sendToClient(client, .reply(reply)))
    }

    private mutating func publish(_ event: SkyEvent, into actions: inout [BrokerAction]) {
        lastEventSeq += 1
        var event = event
        event.seq = lastEventSeq
        actions.append(.publish(event))
    }
}
