import DequeModule
import HeapModule
import SkyProtocol
import SkyWire

extension BrokerStateMachine {
    /// A message arrived on the workers ROUTER from `peer`.
    /// - Parameters:
    ///   - host: the address the message came from, if known (recorded on READY).
    ///   - key: the sender's authenticated identity (ZAP User-Id) when the broker runs CURVE. A
    ///     worker's registration belongs to the key that registered it. Routing ids are whatever
    ///     a peer announces, and libzmq gives a registered worker's id to a new connection only
    ///     once the worker's own connection is gone; so a message from that id under another
    ///     key is dropped unread, and the registration it would have inherited ends (its tasks
    ///     go to other workers).
    package mutating func workerMessage(
        from peer: PeerID, frames: [[UInt8]], host: String? = nil, key: String? = nil, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        workerMessage(from: peer, message: Frames(frames), host: host, key: key, now: now, into: &actions)
    }

    /// A message arrived on the workers ROUTER from `peer` (its frames after the routing id, in
    /// one buffer, as the shell reads them).
    package mutating func workerMessage(
        from peer: PeerID, message frames: Frames, host: String? = nil, key: String? = nil, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        lastNow = now
        clockKeyRates(now)
        // One lookup of the sender for the whole message: its key now, its liveness and its
        // reply's delivery below (nothing adds or removes workers in between).
        let known = workerIndex(of: peer)
        if let known, let name = withWorker(at: known, { $0.key != key ? $0.name : nil }) {
            counters.spoofedWorkerMessages += 1
            actions.append(
                .log(
                    .warning,
                    "a peer with another key took over a worker's routing id; its message is dropped and the worker's registration ends",
                    ["key": key ?? "none", "worker": name, "peer": "\(peer)"]))
            remove(peer, reason: .unreachable, now: now, into: &actions)
            return
        }
        // Any message is a sign of life (docs/protocol.md, HEARTBEAT), a malformed one too: a
        // newer worker's command this broker cannot read must not make it look dead.
        if let known { withWorker(at: known) { $0.lastHeard = now } }
        let command: WorkerToBroker
        do {
            command = try WorkerToBroker.decode(frames)
        } catch {
            switch try? ClientToBroker.decode(frames) {
            case .request(let request)?:
                misdirected(client: peer, request.requestID, attempt: request.header.attempt, now: now, into: &actions)
                return
            case .packedRequest(let request)?:
                misdirected(
                    client: peer, request.requestID, attempt: request.header.attempt, packed: true, now: now,
                    into: &actions)
                return
            case .cancel(let requestID)?:
                // A CANCEL's answer has attempt 0 (docs/protocol.md, CANCEL).
                misdirected(client: peer, requestID, attempt: 0, now: now, into: &actions)
                return
            case nil:
                break
            }
            counters.malformedWorkerMessages += 1
            logAboutPeer(.warning, "dropped malformed message from worker", now: now, into: &actions) {
                ["peer": "\(peer)", "error": "\(error)"]
            }
            if Self.looksLikeReady(frames) {
                refuseRegistration(peer, reason: "invalid READY: \(error)", now: now, into: &actions)
            }
            return
        }
        if case .ready(let announcement) = command {
            register(peer, announcement, host: host, key: key, now: now, into: &actions)
            return
        }
        guard let known else {
            switch command {
            case .reply(_, let reply), .packedReply(_, let reply):
                // From a worker the broker gave up on (expired, then woke up): its tasks are
                // already elsewhere. Drop the reply and make it register again.
                counters.staleReplies += 1
                logAboutPeer(.info, "dropped stale reply from an unregistered worker", now: now, into: &actions) {
                    ["request": "\(reply.requestID)", "peer": "\(peer)"]
                }
                actions.append(.sendToWorker(peer, .disconnect))
            case .heartbeat, .features, .draining, .progress:
                let what =
                    switch command {
                    case .heartbeat: "HEARTBEAT"
                    case .draining: "DRAINING"
                    case .progress: "PROGRESS"
                    default: "FEATURES"
                    }
                // A worker the broker forgot (it restarted, or declared the worker dead) must
                // hear so, whatever it says: a FEATURES after a READY the broker never saw, or
                // a DRAINING that no acknowledgement would ever answer, would otherwise leave
                // it waiting on a registration that does not exist (docs/protocol.md,
                // DISCONNECT: every command from an unregistered peer is answered and counted).
                counters.unknownWorkerMessages += 1
                logAboutPeer(
                    .info, "message from an unregistered worker; telling it to register", now: now, into: &actions
                ) { ["peer": "\(peer)", "command": what] }
                actions.append(.sendToWorker(peer, .disconnect))
            case .disconnect:
                // Counted like any message from a stranger, but not answered: the peer is
                // leaving, and a DISCONNECT back would only tell it to come back.
                counters.unknownWorkerMessages += 1
            case .ready:
                break
            }
            return
        }
        switch consume command {
        case .ready:
            break
        case .reply(let tag, let reply), .packedReply(let tag, let reply):
            complete(at: peer, known, tag: tag, answer: reply, now: now, into: &actions)
        case .heartbeat:
            break
        case .features(let names):
            // The last FEATURES names all the worker takes.
            _ = withWorker(peer) { worker in
                worker.acceptsTrace = names.contains(TraceContext.feature)
                worker.takesPacked = names.contains(WireFormat.packedFeature)
            }
        case .progress(let tag, let requestID, let report):
            progress(from: peer, tag: tag, requestID: requestID, report, now: now, into: &actions)
        case .disconnect:
            remove(peer, reason: .graceful, now: now, into: &actions)
        case .draining:
            guard let record = workers[peer] else { return }
            // A repeat is acknowledged again (its worker may have missed the first answer, or
            // asks once more), and is logged and published once.
            guard !record.draining else { return actions.append(.sendToWorker(peer, .drainingAcknowledged)) }
            withWorker(peer) { $0.draining = true }
            // Every task for it was sent before this; the worker runs those, then leaves.
            actions.append(.sendToWorker(peer, .drainingAcknowledged))
            actions.append(
                .log(
                    .info, "worker draining",
                    ["worker": record.name, "peer": "\(peer)", "tasks": "\(record.held)"]))
            publish(
                SkyEvent(seq: 0, event: .workerDraining, time: "", worker: record.info, tasksHeld: record.held),
                into: &actions)
        }
    }

    /// The shell could not deliver a message to a worker: its connection is gone.
    package mutating func workerUnreachable(_ peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        lastNow = now
        clockKeyRates(now)
        guard workers[peer] != nil else { return }
        remove(peer, reason: .unreachable, now: now, into: &actions)
    }

    private mutating func register(
        _ peer: PeerID, _ announcement: WorkerAnnouncement, host: String?, key: String?, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        if workers[peer] != nil {
            logAboutPeer(.warning, "a worker sent a second READY; disconnecting it", now: now, into: &actions) {
                ["peer": "\(peer)"]
            }
            remove(peer, reason: .protocolError, now: now, into: &actions)
            actions.append(.sendToWorker(peer, .disconnect))
            return
        }
        if stopping {
            actions.append(.sendToWorker(peer, .disconnect))
            return
        }
        if let reserved = announcement.services.first(where: { $0.hasPrefix(BrokerService.prefix) }) {
            refuseRegistration(
                peer, reason: "service names starting with \(BrokerService.prefix) are the broker's own: \(reserved)",
                now: now, into: &actions)
            return
        }
        guard deliveries.hasRoom else {
            refuseRegistration(
                peer,
                reason:
                    "the broker holds \(deliveries.limit) workers and deliveries at once, its limit; retry once workers leave or tasks finish",
                now: now, into: &actions)
            return
        }
        memoryReturn.registered(bytes: announcement.services.reduce(0) { $0 + $1.utf8.count })
        // In order, each once: a set, as a READY may name a thousand services.
        var seen = Set<String>()
        let services = announcement.services.filter { seen.insert($0).inserted }
        var numbers: [ServiceBook.Number] = []
        for service in services {
            guard let number = self.services.number(for: service, limit: Int(ServiceBook.none)) else {
                refuseRegistration(
                    peer, reason: "the broker knows \(ServiceBook.none) services already, its limit",
                    now: now, into: &actions)
                return
            }
            numbers.append(number)
        }
        var record = WorkerRecord(
            id: peer, name: announcement.name, capacity: Int(announcement.capacity), services: services,
            host: host, key: key, lastHeard: now)
        record.serviceNumbers = numbers
        record.anchor = deliveries.addWorker(peer)
        addWorker(record)
        for number in numbers { self.services[number].workers.append(peer) }
        withJobs(now: now, into: &actions) {
            $0.workerJoined(serving: record.services, capacity: record.capacity, into: &$1)
        }
        // Before any REQUEST on this connection: the edition the broker speaks, the largest
        // result the worker may send back, and that it may answer packed (and ask for packed
        // REQUESTs with its own FEATURES). The REQUEST header's longer forms are the clients'.
        var features = BrokerFeatures(
            edition: BrokerFeatures.currentEdition, maxFrameSize: Int(configuration.maxFrameSize), takesPacked: true,
            takesProgress: true)
        features.heartbeatMilliseconds = Int(configuration.heartbeatInterval.wholeMilliseconds)
        actions.append(.sendToWorker(peer, .features(features.lines)))
        // Within the peer-line budget: a peer that sends READY, then what gets it disconnected,
        // over and over, wrote two lines a cycle (a quarter of a megabyte each with a thousand
        // long names) until the disk filled.
        logAboutPeer(.info, "worker connected", now: now, into: &actions) {
            [
                "worker": announcement.name, "peer": "\(peer)", "capacity": "\(record.capacity)",
                "services": Self.loggedServices(services),
            ]
        }
        publish(SkyEvent(seq: 0, event: .workerConnected, time: "", worker: record.info), into: &actions)
        fill(peer, now: now, into: &actions)
    }

    /// Removes a worker. Each task it held goes back to the front of its queue, or fails with
    /// `workerLost` once it was delivered the maximum number of times.
    mutating func remove(_ peer: PeerID, reason: DisconnectReason, now: Instant, into actions: inout [BrokerAction]) {
        guard let record = removeWorker(peer) else { return }
        jobs.workerLeft(serving: record.services, capacity: record.capacity)
        let grace = Self.nanoseconds(configuration.noWorkersGrace)
        for number in record.serviceNumbers {
            services[number].workers.removeAll { $0 == peer }
            if !services[number].isServed { services[number].lastWorkerLeftAt = ticks(now) }
            if !services[number].isServed && queue.hasEntries(number) {
                // Requests already waiting get `noWorkers` at the end of their grace, counted
                // from now, unless a worker joins: looked at when the first of them can end.
                let first = min(grace, services[number].shortestAskedGrace)
                unserved.insert(UnservedEntry(expiry: ticks(now) + first, service: services[number].name))
            }
        }
        var requeued = 0
        let lost = deliveries.removeWorker(anchor: record.anchor).map(\.held)
        // Newest first, so that prepending leaves the oldest at the front.
        for held in lost.sorted(by: { $0.task.arrival > $1.task.arrival }) {
            vacatePlace(of: held.task)
            if held.answered {
                finishRequest(held.task.client)
                continue
            }
            // Queued again below (which moves it in ``tasks``), or answered.
            if Self.isJob(held.task) || held.task.deliveries >= configuration.maxDeliveries {
                tasks[held.key] = nil
            }
            if Self.isJob(held.task) {
                if jobDeliveryLost(held.task, worker: record.name, now: now, into: &actions) { requeued += 1 }
            } else if held.task.deliveries >= configuration.maxDeliveries {
                counters.failedWorkerLost += 1
                fail(
                    held.task, .workerLost,
                    "the workers running it were lost \(held.task.deliveries) times (the limit); the last was \(record.name)",
                    worker: peer, into: &actions)
            } else {
                // Its service stays known until the next stats pass at least: it has a queue.
                enqueue(held.task, now: now)
                requeued += 1
                publishTask(
                    .taskRedispatched,
                    TaskInfo(
                        requestID: held.task.request.requestID.description, service: held.task.request.service,
                        deliveries: Int(held.task.deliveries), worker: peer.description),
                    into: &actions)
            }
        }
        counters.requeued += UInt64(requeued)
        if reason == .expired { counters.workersExpired += 1 }
        logAboutPeer(reason == .graceful ? .info : .warning, "worker disconnected", now: now, into: &actions) {
            ["worker": record.name, "peer": "\(peer)", "reason": reason.rawValue, "requeued": "\(requeued)"]
        }
        publish(
            SkyEvent(
                seq: 0, event: .workerDisconnected, time: "", worker: record.info, reason: reason,
                tasksHeld: lost.count),
            into: &actions)
        var touched = Set(lost.map(\.task.request.service))
        touched.formUnion(record.services.filter { jobs.hasWork(for: $0) })
        for service in touched {
            withJobs(now: now, into: &actions) { $0.prepare(service, into: &$1) }
            for candidate in workers(serving: service) { fill(candidate, now: now, into: &actions) }
        }
    }

    /// A worker's REPLY; `index`: the worker's place in ``workers``, found as its message arrived.
    private mutating func complete(
        at peer: PeerID, _ index: WorkerIndex, tag frame: DeliveryTag, answer: consuming TaskReply,
        now: Instant, into actions: inout [BrokerAction]
    ) {
        let failed = answer.status != .ok
        // The delivery is taken by its tag, and the reply counted in the worker's record, in
        // place. Two plain lets, not an optional tuple: the tuple was copied and destroyed
        // through the runtime's generic tuple witnesses on every reply.
        guard let tag = frame.number, let held = deliveries.take(tag, heldBy: peer, requestID: answer.requestID)
        else {
            counters.staleReplies += 1
            logAboutPeer(.info, "dropped stale reply: the worker no longer holds that task", now: now, into: &actions) {
                ["request": "\(answer.requestID)", "peer": "\(peer)"]
            }
            return
        }
        vacatePlace(of: held.task)
        withWorker(at: index) { worker in
            worker.held -= 1
            worker.completed += 1
            if failed { worker.failed += 1 }
        }
        tally.replied(failed: failed)
        // The worker's name is read only where it is used, on failures: taken on every reply,
        // its reference was counted up and down.
        if !answer.status.isWorkersToSend {
            let workerName = workers.values[index].name
            logAboutPeer(
                .warning, "a worker answered with a status only the broker sends; passed on as internalError", now: now,
                into: &actions
            ) { ["worker": workerName, "status": "\(answer.status)", "request": "\(answer.requestID)"] }
            answer = Self.fromWorker(answer, refusing: answer.status, worker: workerName)
        }
        let key = held.key
        let status = answer.status
        if held.answered {
            // The client cancelled this delivery (and may have retried elsewhere), or its lease
            // ran out: it was answered, and counted, then. The reply only returns the credit.
            counters.repliesAfterCancel += 1
            releaseCancelledDelivery(key, at: peer)
        } else {
            // The closure captures plain values: capturing `held` copied the delivery (its
            // request and body references) on every reply.
            let (took, waited) = (ticks(now) - held.task.arrivedAt, held.waited)
            recordWindow(of: held.task.service) { $0.record(nanoseconds: took, status: status, waited: waited) }
            if failed {
                let workerName = workers.values[index].name
                sampleFailure(held.task, answer.status, RemoteErrorBody(decoding: answer.body), worker: workerName)
            }
            tasks[key] = nil
            // Moved on into the client's action, not copied (its references counted twice over).
            var answer = consume answer
            answer.attempt = held.task.request.header.attempt
            let requestID = answer.requestID
            if held.task.request.header.keepIfAbandoned && !Self.isJob(held.task) {
                rememberKeptReply(to: held, of: key.client, now: now)
            }
            reply(to: key.client, consume answer, into: &actions)
            if configuration.taskEvents {
                publishTask(
                    .taskCompleted,
                    TaskInfo(
                        requestID: requestID.description, service: held.task.request.service,
                        deliveries: Int(held.task.deliveries), worker: peer.description,
                        status: status.description),
                    into: &actions)
            }
            finishRequest(key.client)
        }
        // No worker joined or left since `index` was found: the dispatches use it.
        fill(peer, at: index, now: now, into: &actions)
    }

    /// A worker's reply whose status only the broker may send (``ReplyStatus/isWorkersToSend``),
    /// made an `internalError` that names the worker and the status: passed on as it came,
    /// `wrongEndpoint` stopped the client's every call and `keptAsJob` named a job that was
    /// never kept.
    static func fromWorker(_ reply: TaskReply, refusing status: ReplyStatus, worker: String) -> TaskReply {
        let sent = RemoteErrorBody(decoding: reply.body)
        let message =
            "worker \(worker) answered with status \(status.rawValue) (\(status)), which only the broker sends; its message: \(sent.message)"
        return TaskReply(
            requestID: reply.requestID, attempt: reply.attempt, status: .internalError,
            body: RemoteErrorBody(type: invalidWorkerStatusType, message: message).encoded())
    }

    /// The error type of ``fromWorker(_:refusing:worker:)``'s replies.
    static let invalidWorkerStatusType = "invalidWorkerStatus"

    /// A worker's PROGRESS: kept with the job its delivery runs. For a call it is not kept
    /// (nobody could read it); one for a delivery the worker no longer holds (a handler's last
    /// report racing its cancel or its worker's loss) is dropped, as expected, uncounted.
    private mutating func progress(
        from peer: PeerID, tag: DeliveryTag, requestID: RequestID, _ report: ProgressReport, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        guard let number = tag.number, deliveries.worker(of: number) == peer,
            let held = deliveries[number], held.task.request.requestID == requestID
        else { return }
        guard Self.isJob(held.task) else { return }
        withJobs(now: now, into: &actions) { $0.progress(JobID(requestID), report, into: &$1) }
    }

    /// Whether frames start like a READY (signature and command), however wrong the rest.
    static func looksLikeReady(_ frames: Frames) -> Bool {
        // The one-byte command first: the common message, a REPLY, is turned away there
        // without the signature's comparison (a byte at a time).
        frames.count >= 2 && frames[1].count == 1 && frames[1].first == WorkerToBroker.Command.ready.rawValue
            && frames[0].elementsEqual(WireFormat.workerSignature)
    }

    /// Refuses a worker's registration with REFUSED and the reason, which the worker reports
    /// before it stops (at most ``Configuration/refusalsPerSecond`` answers a second).
    package mutating func refuseRegistration(
        _ peer: PeerID, reason: String, now: Instant, into actions: inout [BrokerAction]
    ) {
        counters.refusedRegistrations += 1
        logAboutPeer(.warning, "refused a worker", now: now, into: &actions) { ["peer": "\(peer)", "reason": reason] }
        guard refusals.admit(.workers, now: now).allowed else { return }
        actions.append(.sendToWorker(peer, .refused(reason: reason)))
    }

    /// A client's REQUEST or CANCEL on the workers port: answered (rate-limited) with a REPLY
    /// `wrongEndpoint` for its request id that names the clients endpoint, packed to a packed
    /// REQUEST, as every reply to one is.
    private mutating func misdirected(
        client peer: PeerID, _ requestID: RequestID, attempt: UInt32, packed: Bool = false, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        counters.misdirectedMessages += 1
        guard refusals.admit(.workers, now: now).allowed else { return }
        let answer = TaskReply.failure(
            requestID, .wrongEndpoint,
            message:
                "this is the broker's workers endpoint (\(configuration.workersEndpoint)); clients connect to \(configuration.clientsEndpoint)",
            attempt: attempt)
        counters.repliesSent += 1
        let command: BrokerToClient = packed ? .packedReply(answer) : .reply(answer)
        actions.append(.sendRaw(.workers, peer, command.encode()))
        actions.append(
            .log(
                .warning, "a client sent a request to the workers port; told it which to use",
                ["clients": configuration.clientsEndpoint]))
    }

    /// A worker's services for a log line: the first ``loggedServiceNames``, then how many in
    /// all (a READY may name 1,024 of 255 bytes).
    static func loggedServices(_ services: [String]) -> String {
        guard services.count > loggedServiceNames else { return services.joined(separator: ",") }
        return services.prefix(loggedServiceNames).joined(separator: ",") + ",… (\(services.count) in all)"
    }

    static let loggedServiceNames = 16
}
