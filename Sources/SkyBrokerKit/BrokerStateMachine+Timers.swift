import DequeModule
import HeapModule
import SkyProtocol

extension BrokerStateMachine {
    /// Time passed: expire silent workers, heartbeat the rest, answer requests whose deadline
    /// passed, take tasks whose lease ran out from their workers, and publish stats when due.
    public mutating func tick(now: Instant, into actions: inout [BrokerAction]) {
        for (peer, record) in workers where record.lastHeard + configuration.expiry <= now {
            remove(peer, reason: .expired, now: now, into: &actions)
        }
        if now >= nextHeartbeat ?? now {
            for peer in workers.keys { actions.append(.sendToWorker(peer, .heartbeat)) }
            nextHeartbeat = now + configuration.heartbeatInterval
        }
        expireDeadlines(now: now, into: &actions)
        expireLeases(now: now, into: &actions)
        compactIfMostlyDead()
        if let due = nextStats {
            if now >= due {
                publishStats(over: configuration.statsInterval, now: now, into: &actions)
                nextStats = now + configuration.statsInterval
            }
        } else {
            nextStats = now + configuration.statsInterval
        }
    }

    private mutating func expireDeadlines(now: Instant, into actions: inout [BrokerAction]) {
        let now = ticks(now)
        while let first = deadlines.min, first.deadline <= now {
            deadlines.removeMin()
            guard let task = waitingRequest(first.service, arrival: first.arrival),
                waiting[task.request.requestID] == first.arrival
            else { continue }
            waiting[task.request.requestID] = nil
            deadQueued += 1
            // Usually the expired request is the oldest of its queue: trim it right away.
            _ = oldestWaiting(first.service)
            counters.deadlinesExceeded += 1
            if workersByService[first.service]?.isEmpty ?? true {
                fail(
                    task, .noWorkers, "no worker serves \(first.service) and none joined before the deadline",
                    into: &actions)
            } else {
                fail(
                    task, .deadlineExceeded, "it waited for a free \(first.service) worker past its deadline",
                    into: &actions)
            }
        }
    }

    private mutating func expireLeases(now: Instant, into actions: inout [BrokerAction]) {
        var expired: [(PeerID, TaskKey, InFlightTask)] = []
        for (peer, record) in workers {
            for (key, held) in record.inFlight {
                if let lease = held.leaseExpiry, lease <= now { expired.append((peer, key, held)) }
            }
        }
        for (peer, key, held) in expired {
            workers[peer]?.inFlight[key] = nil
            running[key.requestID] = nil
            actions.append(.sendToWorker(peer, .cancel(client: key.client.bytes, key.requestID)))
            if !held.answered {
                counters.deadlinesExceeded += 1
                fail(
                    held.task, .deadlineExceeded,
                    "it ran past its deadline and the grace period on worker \(workers[peer]?.name ?? peer.description)",
                    worker: peer, into: &actions)
            }
            fill(peer, now: now, into: &actions)
        }
    }

    private mutating func publishStats(over period: Duration, now: Instant, into actions: inout [BrokerAction]) {
        let completed = counters.repliesSent
        let seconds = period.inSeconds
        let stats = BrokerStats(
            workers: workers.count, capacity: workers.values.reduce(0) { $0 + $1.capacity }, queued: queuedCount,
            inFlight: inFlightCount, completed: completed,
            completedPerSecond: seconds > 0 ? Double(completed - completedAtLastStats) / seconds : 0)
        completedAtLastStats = completed
        publish(
            SkyEvent(seq: 0, event: .brokerStats, time: "", workers: workerLoads(now: now), stats: stats),
            into: &actions)
    }

    /// The broker is stopping: refuse new work, answer everything waiting or running with
    /// `brokerShuttingDown`, and tell every worker.
    public mutating func shutdown(now: Instant, into actions: inout [BrokerAction]) {
        guard !stopping else { return }
        stopping = true
        let message = "the broker shut down before the task finished; retry once it is back"
        for service in Array(queues.keys) {
            while let task = popWaiting(service) { fail(task, .brokerShuttingDown, message, into: &actions) }
        }
        for (peer, record) in workers {
            for held in record.inFlight.values where !held.answered {
                fail(held.task, .brokerShuttingDown, message, worker: peer, into: &actions)
            }
            actions.append(.sendToWorker(peer, .disconnect))
        }
        workers.removeAll()
        workersByService.removeAll()
        running.removeAll()
        deadlines = Heap()
        actions.append(.log(.info, "stopping: answered waiting and running requests, told the workers"))
    }
}
