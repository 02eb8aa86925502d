import DequeModule
import HeapModule
import SkyProtocol

extension BrokerStateMachine {
    /// Time passed: expire silent workers, heartbeat the rest, answer requests whose deadline,
    /// maximum wait or no-workers grace passed (at most ``Configuration/expiryBatch``; the rest at
    /// the next tick), take tasks whose lease ran out from their workers, greet subscribers that
    /// waited for the hello interval, summarise log lines about peers held back in a second that
    /// is over, and publish stats when due.
    public mutating func tick(now: Instant, into actions: inout [BrokerAction]) {
        lastNow = now
        for (peer, record) in workers where record.lastHeard + configuration.expiry <= now {
            remove(peer, reason: .expired, now: now, into: &actions)
        }
        if now >= nextHeartbeat ?? now {
            for peer in workers.keys { actions.append(.sendToWorker(peer, .heartbeat)) }
            nextHeartbeat = now + configuration.heartbeatInterval
        }
        // Asked for by a previous tick, so that dropping the old tables and returning their
        // memory to the system are two iterations of the loop, not one twice as long.
        if releaseMemorySoon {
            releaseMemorySoon = false
            let first = Self.laterMemoryReleases.first
            laterMemoryRelease = (now + first, first * 2)
            actions.append(.releaseMemory)
        } else if let later = laterMemoryRelease, now >= later.at {
            laterMemoryRelease = later.next <= Self.laterMemoryReleases.last ? (now + later.next, later.next * 2) : nil
            actions.append(.releaseMemory)
        }
        var budget = configuration.expiryBatch
        expireDeadlines(now: now, budget: &budget, into: &actions)
        expireUnserved(now: now, budget: &budget, into: &actions)
        expireLeases(now: now, budget: &budget, into: &actions)
        jobTick(now: now, budget: &budget, into: &actions)
        hasExpiryBacklog = budget == 0
        compactIfMostlyDead()
        if helloPending, now >= nextHelloAllowed ?? now { sayHello(now: now, into: &actions) }
        summariseHeldBackLines(now: now, into: &actions)
        if let due = nextStats {
            if now >= due {
                publishStats(over: configuration.statsInterval, now: now, into: &actions)
                nextStats = now + configuration.statsInterval
            }
        } else {
            nextStats = now + configuration.statsInterval
        }
    }

    private mutating func expireDeadlines(now: Instant, budget: inout Int, into actions: inout [BrokerAction]) {
        let now = ticks(now)
        while budget > 0, let first = deadlines.min, first.expiry <= now {
            deadlines.removeMin()
            guard let task = waitingRequest(first.service, arrival: first.arrival),
                waiting[task.key] == first.arrival
            else { continue }
            let served = isServed(first.service)
            let expiry = queueExpiry(task)
            if served && first.expiry < expiry {
                // Its no-workers grace ran out, but a worker of the service joined meanwhile.
                deadlines.insert(DeadlineEntry(expiry: expiry, arrival: first.arrival, service: first.service))
                continue
            }
            budget -= 1
            dropWaiting(task.key, service: first.service, arrival: first.arrival)
            // Usually the expired request is the oldest of its queue: trim it right away.
            _ = oldestWaiting(first.service)
            if !served {
                answerNoWorkers(task, into: &actions)
            } else if expiry < task.deadline {
                counters.maxWaitExpired += 1
                fail(
                    task, .deadlineExceeded,
                    "it waited \(configuration.maxWait) for a free \(first.service) worker, the broker's limit (--max-wait)",
                    into: &actions)
            } else {
                counters.deadlinesExceeded += 1
                fail(
                    task, .deadlineExceeded, "it waited for a free \(first.service) worker past its deadline",
                    into: &actions)
            }
        }
    }

    /// Services whose last worker left while requests of them waited: once the grace has passed
    /// and still nobody serves them, their requests are answered `noWorkers`.
    private mutating func expireUnserved(now: Instant, budget: inout Int, into actions: inout [BrokerAction]) {
        let now = ticks(now)
        while budget > 0, let first = unserved.min, first.expiry <= now {
            if isServed(first.service) {
                unserved.removeMin()
                continue
            }
            while budget > 0, let task = popWaiting(first.service) {
                budget -= 1
                answerNoWorkers(task, into: &actions)
            }
            if queues[first.service] == nil { unserved.removeMin() }
        }
    }

    private mutating func answerNoWorkers(_ task: QueuedRequest, into actions: inout [BrokerAction]) {
        counters.noWorkersAnswered += 1
        fail(
            task, .noWorkers,
            "no connected worker serves \(task.request.service), and none joined within the grace period; start a worker that serves it, or check the service name",
            into: &actions)
    }

    /// A delivery still held at its deadline plus the lease grace: its caller (if it still
    /// waits) is answered `deadlineExceeded` and the worker is told CANCEL (again, if the client
    /// cancelled it already). The delivery keeps its credit until the worker answers, as a
    /// client-cancelled one does: the worker's handler may still run (it ignores cancellation),
    /// and a credit returned now would make the broker send a task to a worker with no free
    /// slot, whose caller would be refused `overloaded` by the worker.
    private mutating func expireLeases(now: Instant, budget: inout Int, into actions: inout [BrokerAction]) {
        let nowTicks = ticks(now)
        while budget > 0, let first = leases.min, first.expiry <= nowTicks {
            leases.removeMin()
            guard let held = workers[first.peer]?.inFlight[first.tag] else { continue }
            budget -= 1
            let key = held.task.key
            let name = workers[first.peer]?.name ?? first.peer.description
            actions.append(.sendToWorker(first.peer, .cancel(tag: Self.tagFrame(first.tag), key.requestID)))
            if !held.answered {
                running[key] = nil
                workers[first.peer]?.inFlight[first.tag]?.answered = true
                workers[first.peer]?.cancelledKeys.insert(key)
                counters.deadlinesExceeded += 1
                fail(
                    held.task, .deadlineExceeded, "it ran past its deadline and the grace period on worker \(name)",
                    worker: first.peer, keepsClient: true, into: &actions)
            }
            actions.append(
                .log(
                    .warning,
                    "a task runs past its deadline and the lease grace; its worker's slot stays taken until the handler returns (does it ignore cancellation?)",
                    [
                        "worker": "\(name)", "service": "\(held.task.request.service)",
                        "request": "\(key.requestID)",
                    ]))
        }
    }

    private mutating func publishStats(over period: Duration, now: Instant, into actions: inout [BrokerAction]) {
        let completed = tasksCompleted
        let seconds = period.inSeconds
        var stats = BrokerStats(
            workers: workers.count, capacity: workers.values.reduce(0) { $0 + $1.capacity }, queued: queuedCount,
            inFlight: inFlightCount, completed: completed,
            completedPerSecond: seconds > 0 ? Double(completed - completedAtLastStats) / seconds : 0,
            queuedBytes: queuedBytes, longestIterationMilliseconds: longestIteration.inSeconds * 1000,
            failed: tasksFailed, jobs: jobCounts)
        if !serviceWindows.isEmpty { actions.append(.serviceWindows(serviceWindows)) }
        stats.services = serviceStats(over: seconds)
        if !periodFailures.isEmpty {
            stats.failures = periodFailures
            periodFailures.removeAll(keepingCapacity: true)
        }
        completedAtLastStats = completed
        longestIteration = .zero
        publish(
            SkyEvent(seq: 0, event: .brokerStats, time: "", workers: workerLoads(now: now), stats: stats),
            into: &actions)
    }

    /// Each service's period, then a new period: the services served, waiting or with work in
    /// it, the busiest ``ServiceStats/maxServices``. Costs a pass over those services once a period.
    private mutating func serviceStats(over seconds: Double) -> [String: ServiceStats] {
        var all: [String: ServiceStats] = [:]
        for service in Set(serviceWindows.keys).union(queuedByService.keys).union(workersByService.keys) {
            let window = serviceWindows[service] ?? ServiceWindow()
            all[service] = ServiceStats(
                queued: queuedByService[service]?.count ?? 0, queuedBytes: queuedByService[service]?.bytes ?? 0,
                completed: window.completed, failed: window.failed,
                completedPerSecond: seconds > 0 ? Double(window.completed) / seconds : 0,
                p50Milliseconds: window.quantileMilliseconds(0.5), p99Milliseconds: window.quantileMilliseconds(0.99))
        }
        serviceWindows.removeAll(keepingCapacity: true)
        guard all.count > ServiceStats.maxServices else { return all }
        let busiest = all.sorted {
            ($0.value.completed + UInt64($0.value.queued)) > ($1.value.completed + UInt64($1.value.queued))
        }
        return Dictionary(uniqueKeysWithValues: busiest.prefix(ServiceStats.maxServices).map { ($0.key, $0.value) })
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
        answerJobCallersAtShutdown(message, into: &actions)
        workers.removeAll()
        workersByService.removeAll()
        running.removeAll()
        deadlines = Heap()
        leases = Heap()
        unserved = Heap()
        actions.append(.log(.info, "stopping: answered waiting and running requests, told the workers"))
    }
}
