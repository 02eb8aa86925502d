import DequeModule
import HeapModule
import SkyProtocol

extension BrokerStateMachine {
    /// Puts a request in its service's queue (at the front when it comes back from a lost worker).
    mutating func enqueue(_ task: QueuedRequest, atFront: Bool) {
        let service = task.request.service
        if atFront {
            queues[service, default: []].prepend(task)
        } else {
            queues[service, default: []].append(task)
        }
        waiting[task.request.requestID] = task.arrival
        if task.deadline != QueuedRequest.noDeadline {
            deadlines.insert(DeadlineEntry(deadline: task.deadline, arrival: task.arrival, service: service))
        }
    }

    /// Changes the queued request of `service` that arrived as number `arrival`, if there is one.
    mutating func updateWaitingRequest(_ service: String, arrival: UInt64, _ change: (inout QueuedRequest) -> Void) {
        guard let index = queueIndex(service, arrival: arrival) else { return }
        change(&queues[service]![index])
    }

    /// The waiting request of `service` that arrived as number `arrival`, if it is still live.
    /// A queue is ordered by arrival (requests join at the back; requests coming back from a lost
    /// worker are older than every request still waiting behind them), so this is a binary search.
    func waitingRequest(_ service: String, arrival: UInt64) -> QueuedRequest? {
        guard let index = queueIndex(service, arrival: arrival) else { return nil }
        return queues[service]?[index]
    }

    /// Where in its queue the request that arrived as number `arrival` is (binary search).
    private func queueIndex(_ service: String, arrival: UInt64) -> Int? {
        guard let queue = queues[service] else { return nil }
        var low = queue.startIndex
        var high = queue.endIndex
        while low < high {
            let middle = (low + high) / 2
            if queue[middle].arrival < arrival { low = middle + 1 } else { high = middle }
        }
        guard low < queue.endIndex, queue[low].arrival == arrival else { return nil }
        return low
    }

    /// The oldest live request of a service, removed from the queue. Skips entries that were
    /// cancelled or expired while they waited.
    mutating func popWaiting(_ service: String) -> QueuedRequest? {
        while let task = queues[service]?.popFirst() {
            guard waiting[task.request.requestID] == task.arrival else {
                deadQueued -= 1
                continue
            }
            waiting[task.request.requestID] = nil
            if queues[service]?.isEmpty == true { queues[service] = nil }
            return task
        }
        queues[service] = nil
        return nil
    }

    /// Arrival number of the oldest live request of a service.
    mutating func oldestWaiting(_ service: String) -> UInt64? {
        while let head = queues[service]?.first {
            if waiting[head.request.requestID] == head.arrival { return head.arrival }
            queues[service]?.removeFirst()
            deadQueued -= 1
        }
        queues[service] = nil
        return nil
    }

    /// Drops what answered requests left behind once it outweighs what is live: queue entries
    /// of requests that expired or were cancelled while waiting (taken out of ``waiting`` only;
    /// a service that no worker serves never pops them), and deadline entries of requests that
    /// were dispatched or answered. Without it, requests with short deadlines for a service
    /// nobody serves would grow the broker without bound. Amortised O(1) per request.
    mutating func compactIfMostlyDead() {
        let live = waiting.count
        if deadQueued > 256 && deadQueued > live {
            for service in Array(queues.keys) {
                let kept = queues[service]!.filter { waiting[$0.request.requestID] == $0.arrival }
                queues[service] = kept.isEmpty ? nil : Deque(kept)
            }
            deadQueued = 0
        }
        if deadlines.count > 1024 && deadlines.count > 2 * live {
            var entries: [DeadlineEntry] = []
            for (service, queue) in queues {
                for task in queue where task.deadline != QueuedRequest.noDeadline {
                    entries.append(DeadlineEntry(deadline: task.deadline, arrival: task.arrival, service: service))
                }
            }
            deadlines = Heap(entries)
        }
    }

    /// The worker to give a new task of `service`: a free credit, least loaded, least recently used.
    func bestWorker(for service: String) -> PeerID? {
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

    mutating func dispatch(_ task: QueuedRequest, to peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        var task = task
        task.deliveries += 1
        dispatchCounter += 1
        let key = task.key
        let lease =
            task.deadline == QueuedRequest.noDeadline ? nil : instant(task.deadline) + configuration.leaseGrace
        workers[peer]?.inFlight[key] = InFlightTask(task: task, leaseExpiry: lease)
        workers[peer]?.lastDispatch = dispatchCounter
        running[key.requestID] = peer
        actions.append(.sendToWorker(peer, .request(client: task.client.bytes, task.request)))
        if configuration.taskEvents {
            publish(
                SkyEvent(
                    seq: 0, event: .taskDispatched, time: "",
                    task: TaskInfo(
                        requestID: task.request.requestID.description, service: task.request.service,
                        deliveries: task.deliveries, worker: peer.description)),
                into: &actions)
        }
    }

    /// Gives a worker queued work until its credits are used up or nothing it serves is waiting.
    mutating func fill(_ peer: PeerID, now: Instant, into actions: inout [BrokerAction]) {
        // Only these two fields: a copy of the whole record would share its `inFlight` table, and
        // the dispatches below would then copy that table on write, once per task.
        guard let (services, credits) = workers[peer].map({ ($0.services, $0.freeCredits) }) else { return }
        var free = credits
        while free > 0 {
            var oldest: (service: String, arrival: UInt64)?
            for service in services {
                guard let arrival = oldestWaiting(service) else { continue }
                if oldest == nil || arrival < oldest!.arrival { oldest = (service, arrival) }
            }
            guard let pick = oldest, let task = popWaiting(pick.service) else { return }
            dispatch(task, to: peer, now: now, into: &actions)
            free -= 1
        }
    }
}
