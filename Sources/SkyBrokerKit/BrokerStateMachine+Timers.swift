import DequeModule
import HeapModule
import SkyProtocol
import SkyWire

extension BrokerStateMachine {
    /// Time passed: expire silent workers, heartbeat the rest, answer requests whose deadline,
    /// maximum wait or no-workers grace passed (at most ``Configuration/expiryBatch``; the rest at
    /// the next tick), take tasks whose lease ran out from their workers, greet subscribers that
    /// waited for the hello interval, summarise log lines about peers held back in a second that
    /// is over, and publish stats when due.
    package mutating func tick(now: Instant, into actions: inout [BrokerAction]) {
        lastNow = now
        clockKeyRates(now)
        for (peer, record) in workers where record.lastHeard + configuration.expiry <= now {
            remove(peer, reason: .expired, now: now, into: &actions)
        }
        if periodic.heartbeatsDue(now: now, interval: configuration.heartbeatInterval) {
            for peer in workers.keys { actions.append(.sendToWorker(peer, .heartbeat)) }
        }
        if memoryReturn.isDue(now: now) { actions.append(.releaseMemory) }
        // Measured from the tick's start on the work clock, not from `now` (the batch's time,
        // read before the messages ahead of this tick were handled).
        let clock = configuration.workClock
        var budget = WorkBudget(
            count: configuration.expiryBatch, until: clock() + configuration.tickWorkLimit, clock: clock)
        expireDeadlines(now: now, budget: &budget, into: &actions)
        expireUnserved(now: now, budget: &budget, into: &actions)
        expireLeases(now: now, budget: &budget, into: &actions)
        keptReplies.forget(before: ticks(now) - Self.keptReplyMemory)
        expireKeptCallHolds(now: now, into: &actions)
        rateWake(now: now, into: &actions)
        let nowTicks = ticks(now)
        withJobs(now: now, into: &actions) { $0.tick(now: nowTicks, budget: &budget, into: &$1) }
        hasExpiryBacklog = budget.isSpent
        compactIfMostlyDead()
        if events.isHelloDue(now: now) { sayHello(now: now, into: &actions) }
        summariseHeldBackLines(now: now, into: &actions)
        if periodic.statsDue(now: now, interval: configuration.statsInterval) {
            publishStats(over: configuration.statsInterval, now: now, into: &actions)
        }
    }

    private mutating func expireDeadlines(
        now instant: Instant, budget: inout WorkBudget, into actions: inout [BrokerAction]
    ) {
        let now = ticks(instant)
        while budget.hasRoom, let first = queue.popDeadline(dueBy: now) {
            guard let task = waitingRequest(arrival: first.arrival), !task.dropped else {
                continue
            }
            let served = services[task.service].isServed
            let expiry = queueExpiry(task)
            if served && first.expiry < expiry {
                // Its no-workers grace ran out, but a worker of the service joined meanwhile.
                queue.lookAgain(at: expiry, arrival: first.arrival)
                continue
            }
            if !served, first.expiry < expiry, let graceEnd = graceSinceLastWorker(task), graceEnd > first.expiry,
                graceEnd < expiry
            {
                // A grace entry from before a worker came and went (it took the request and was
                // lost): the grace counts from the loss, as for a request that waited then. It
                // answered `noWorkers` 0.46 s after the loss instead of the grace's 2 s.
                queue.lookAgain(at: graceEnd, arrival: first.arrival)
                continue
            }
            budget.spend()
            // A call that asked to be kept waits on as a job once its wait is over (not at the
            // end of a no-workers grace: that is an answer, not a caller gone).
            var notKept = ""
            if first.expiry >= expiry, task.request.header.keepIfAbandoned {
                switch keepAbandoned(task.key, answering: task.request.header.attempt, now: instant, into: &actions) {
                case .kept:
                    _ = oldestWaiting(task.service)
                    continue
                case .refused(let reason): notKept = "; it could not be kept as a job (\(reason))"
                case .notAsked: break
                }
            }
            dropWaiting(task.key, arrival: first.arrival)
            // Usually the expired request is the oldest of its queue: trim it right away.
            _ = oldestWaiting(task.service)
            if !served {
                // Whichever limit came first ends the wait; the answer is `noWorkers` either way
                // (nobody serves the service: that is why it did not run), and its message names
                // the limit that ran out. A deadline shorter than the grace once read "none
                // joined within the grace period" half a second into a 2 s grace.
                answerNoWorkers(task, endedBy: first.expiry < expiry ? .grace : .deadline, into: &actions)
            } else if expiry < task.deadline {
                counters.maxWaitExpired += 1
                fail(
                    task, .deadlineExceeded,
                    "it waited \(configuration.maxWait) for a free \(task.request.service) worker, the broker's limit (--max-wait)",
                    into: &actions)
            } else {
                counters.deadlinesExceeded += 1
                fail(task, .deadlineExceeded, waitedPastDeadline(task) + notKept, into: &actions)
            }
        }
    }

    /// When a request's no-workers grace ends counted from its service's last worker leaving;
    /// `nil` if none ever left.
    private func graceSinceLastWorker(_ task: QueuedRequest) -> Int64? {
        let since = services[task.service].lastWorkerLeftAt
        guard since != Int64.min else { return nil }
        let (end, overflow) = since.addingReportingOverflow(noWorkersGrace(task))
        return overflow ? nil : end
    }

    /// Why a waiting request's deadline passed: its service paused, its key at its concurrency
    /// limit, or no free worker.
    private func waitedPastDeadline(_ task: QueuedRequest) -> String {
        let name = task.request.service
        if services[task.service].paused {
            return "it waited past its deadline: the service \(name) is paused (skyctl services resume \(name))"
        }
        if let key = task.request.concurrencyKey ?? (isKeyLimited(name) ? "" : nil),
            jobs.book.keyRates.entry(name)?.resting[key] != nil
        {
            return
                "it waited past its deadline: its key \(String(reflecting: key)) waited for its rate limit (skyctl limits list)"
        }
        let limit = task.request.concurrencyLimit
        if limit > 0, let key = task.request.concurrencyKey, queue.placed(task.service, key: key) >= Int(limit) {
            return
                "it waited past its deadline: its concurrency key \(key) was at its limit (\(queue.placed(task.service, key: key)) running, at most \(limit)); see skyctl services keys \(name)"
        }
        return "it waited for a free \(name) worker past its deadline"
    }

    /// Services whose last worker left while requests of them waited: once a grace has passed
    /// and still nobody serves them, the requests whose own grace is over (counted from the
    /// loss, or from their arrival if they came later; the one they asked for, or the broker's)
    /// are answered `noWorkers`. The others wait on, looked at again when theirs ends: the loss
    /// once answered them all at the broker's grace, a request that came a moment before or
    /// asked for a longer grace too.
    private mutating func expireUnserved(
        now instant: Instant, budget: inout WorkBudget, into actions: inout [BrokerAction]
    ) {
        let now = ticks(instant)
        while budget.hasRoom, let first = unserved.min, first.expiry <= now {
            guard let number = services.number(of: first.service), !services[number].isServed else {
                unserved.removeMin()
                continue
            }
            let lost = services[number].lastWorkerLeftAt
            var later: [(task: QueuedRequest, graceFrom: Int64, graceEnd: Int64)] = []
            var emptied = false
            var passLength = 0
            while budget.hasRoom {
                guard let task = popWaiting(number) else {
                    emptied = true
                    break
                }
                budget.spend()
                passLength += 1
                let graceFrom = max(task.arrivedAt, lost)
                let (graceEnd, overflow) = graceFrom.addingReportingOverflow(noWorkersGrace(task))
                if overflow || graceEnd > now {
                    later.append((task, graceFrom, overflow ? .max : graceEnd))
                } else {
                    answerNoWorkers(task, endedBy: .grace, into: &actions)
                }
            }
            let answeredNone = later.count == passLength
            let nextEnd = later.lazy.map(\.graceEnd).min()
            // Put back in their places, each to be looked at again at the end of its grace.
            for (task, graceFrom, _) in later { enqueue(task, now: instant, graceFrom: graceFrom) }
            if emptied || !queue.hasEntries(number) {
                unserved.removeMin()
            } else if answeredNone, let nextEnd {
                // The budget went on requests whose grace goes on, which the next pass would
                // take first again: look again when the first of them ends, not at every tick.
                unserved.removeMin()
                unserved.insert(UnservedEntry(expiry: nextEnd, service: first.service))
            }
        }
    }

    /// Which limit ended a request's wait for a worker of its service.
    enum NoWorkersLimit {
        /// The no-workers grace (the request's `no-workers-ms`, or `--no-workers-grace`).
        case grace
        /// The request's own deadline, or `--max-wait`, before the grace was over.
        case deadline
    }

    private mutating func answerNoWorkers(
        _ task: QueuedRequest, endedBy limit: NoWorkersLimit, into actions: inout [BrokerAction]
    ) {
        counters.noWorkersAnswered += 1
        let service = task.request.service
        let ended: String
        switch limit {
        case .grace:
            ended = "none joined within the no-workers grace"
        case .deadline where queueExpiry(task) < task.deadline:
            ended = "none joined within the broker's --max-wait (\(configuration.maxWait))"
        case .deadline:
            ended =
                "none joined before the request's deadline (\(task.request.header.timeoutMilliseconds) ms after it arrived, before the no-workers grace was over)"
        }
        // A task that ran on a worker that was lost says so: "check the service name" alone
        // misled a caller whose only worker died under its task.
        let lost =
            task.deliveries > 0
            ? "; it had been running on a worker that was lost (\(task.deliveries) time\(task.deliveries == 1 ? "" : "s")): see that worker's log"
            : ""
        fail(
            task, .noWorkers,
            "no connected worker serves \(service), and \(ended)\(lost); start a worker that serves it, or check the service name",
            into: &actions)
    }

    /// A delivery still held at its deadline plus the lease grace (a job's attempt: at its
    /// timeout): its caller (if it still waits) is answered `deadlineExceeded` and the worker is
    /// told CANCEL (again, if the client cancelled it already, or a job's grace to answer ran out). The delivery keeps its credit until the worker answers, as a
    /// client-cancelled one does: the worker's handler may still run (it ignores cancellation),
    /// and a credit returned now would make the broker send a task to a worker with no free
    /// slot, whose caller would be refused `overloaded` by the worker.
    private mutating func expireLeases(now: Instant, budget: inout WorkBudget, into actions: inout [BrokerAction]) {
        let nowTicks = ticks(now)
        while budget.hasRoom, let first = leases.min, first.expiry <= nowTicks {
            leases.removeMin()
            guard let held = deliveries[first.tag], let peer = deliveries.worker(of: first.tag) else { continue }
            budget.spend()
            let key = held.key
            let name = workers[peer]?.name ?? peer.description
            if held.answered {
                // Cancelled already: told again.
                actions.append(.sendToWorker(peer, .cancel(tag: DeliveryTag(number: first.tag), key.requestID)))
            } else if Self.isJob(held.task) {
                // A kept call's lease ended at its deadline; as a job it has no timeout.
                guard let due = leaseExpiry(held.task), due <= nowTicks else { continue }
                // A job's attempt ends at its timeout (``leaseExpiry(_:)``): cancelled at its worker,
                // recorded as a timeout failure (retried as its policy says). The worker has the
                // lease grace to answer the cancel; after it, it is told again and this is logged.
                tasks[key] = nil
                cancelAtWorker(key, tag: first.tag, into: &actions)
                counters.deadlinesExceeded += 1
                let timeout = held.task.request.header.timeoutMilliseconds
                fail(
                    held.task, .deadlineExceeded, "it ran past its timeout (\(timeout) ms) on worker \(name)",
                    worker: peer, keepsClient: true, into: &actions)
                let (graceEnd, overflow) = nowTicks.addingReportingOverflow(Self.nanoseconds(configuration.leaseGrace))
                leases.insert(LeaseEntry(expiry: overflow ? Int64.max : graceEnd, tag: first.tag))
                continue
            } else if held.task.request.header.keepIfAbandoned {
                // Its caller's deadline passed (its lease has no grace): it runs on as a job, or
                // is cancelled, saying why it could not be kept.
                guard
                    case .refused(let reason) = keepAbandoned(
                        key, answering: held.task.request.header.attempt, now: now, into: &actions)
                else { continue }
                tasks[key] = nil
                cancelAtWorker(key, tag: first.tag, into: &actions)
                counters.deadlinesExceeded += 1
                fail(
                    held.task, .deadlineExceeded,
                    "its caller's deadline passed and it could not be kept as a job (\(reason)); it was cancelled on worker \(name)",
                    worker: peer, keepsClient: true, into: &actions)
                continue
            } else {
                tasks[key] = nil
                cancelAtWorker(key, tag: first.tag, into: &actions)
                counters.deadlinesExceeded += 1
                fail(
                    held.task, .deadlineExceeded, "it ran past its deadline and the grace period on worker \(name)",
                    worker: peer, keepsClient: true, into: &actions)
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
        // With the first stats a subscriber takes, not with its greeting: a watcher's snapshot,
        // asked for after the greeting, would already count it, and the watcher never see it.
        if let epoch = configuration.epoch, !events.activeAnnounced, events.isWatched(.brokerActive) {
            events.activeAnnounced = true
            publish(
                SkyEvent(seq: 0, event: .brokerActive, time: "", broker: configuration.instance, epoch: epoch),
                into: &actions)
        }
        let seconds = period.inSeconds
        let closed = tally.closePeriod()
        var stats = BrokerStats(
            workers: workers.count, capacity: workers.values.reduce(0) { $0 + $1.capacity }, queued: queuedCount,
            inFlight: inFlightCount, completed: tally.completed,
            completedPerSecond: seconds > 0 ? Double(closed.completed) / seconds : 0,
            queuedBytes: queue.bytes, longestIterationMilliseconds: closed.longestIteration.inSeconds * 1000,
            failed: tally.failed, jobs: jobs.counts(keptWaiters: keptCalls.waiterCount))
        stats.services = serviceStats(over: seconds, into: &actions)
        stats.counters = counters
        if !closed.failures.isEmpty { stats.failures = closed.failures }
        if !services.limits.isEmpty || !jobs.book.keyRates.isEmpty {
            stats.limits = limitListing(atMost: BrokerStats.maxLimits).limits
        }
        // Once a stats period: a key's bucket that is full again is the same as none.
        if !jobs.book.keyRates.isEmpty { jobs.book.keyRates.dropFullBuckets(now: ticks(now)) }
        publish(
            SkyEvent(seq: 0, event: .brokerStats, time: "", workers: workerLoads(now: now), stats: stats),
            into: &actions)
    }

    /// Each service's period, then a new period: the services served, waiting, paused or with
    /// work in it, the busiest ``ServiceStats/maxServices``. Costs a pass over those services
    /// once a period.
    /// The windows also go to the shell, for the metrics.
    private mutating func serviceStats(over seconds: Double, into actions: inout [BrokerAction]) -> [String:
        ServiceStats]
    {
        var all: [String: ServiceStats] = [:]
        var windows: [String: ServiceWindow] = [:]
        // Services that became idle are forgotten in the same pass.
        let queue = self.queue
        services.updateAll(keeping: queue.hasEntries) { number, service in
            // Kept known only for its rate limit's bucket: nothing to report.
            guard service.isServed || queue.hasEntries(number) || service.window != nil else { return }
            if let window = service.window { windows[service.name] = window }
            let window = service.window ?? ServiceWindow()
            all[service.name] = ServiceStats(
                queued: queue.count(of: number), queuedBytes: queue.bytes(of: number),
                completed: window.completed, failed: window.failed,
                completedPerSecond: seconds > 0 ? Double(window.completed) / seconds : 0,
                p50Milliseconds: window.quantileMilliseconds(0.5), p99Milliseconds: window.quantileMilliseconds(0.99),
                paused: service.paused ? true : nil)
            service.window = nil
        }
        // A service paused with nothing of it here (paused ahead of its workers, or idle) is
        // still one an operator should see paused.
        for name in services.paused where all[name] == nil {
            all[name] = ServiceStats(
                queued: 0, queuedBytes: 0, completed: 0, failed: 0, completedPerSecond: 0, p50Milliseconds: nil,
                p99Milliseconds: nil, paused: true)
        }
        if !windows.isEmpty { actions.append(.serviceWindows(windows)) }
        guard all.count > ServiceStats.maxServices else { return all }
        let busiest = all.sorted {
            ($0.value.completed + UInt64($0.value.queued)) > ($1.value.completed + UInt64($1.value.queued))
        }
        return Dictionary(uniqueKeysWithValues: busiest.prefix(ServiceStats.maxServices).map { ($0.key, $0.value) })
    }

    /// The broker is stopping: refuse new work, answer everything waiting or running with
    /// `brokerShuttingDown`, and tell every worker.
    package mutating func shutdown(now: Instant, into actions: inout [BrokerAction]) {
        guard !stopping else { return }
        stopping = true
        let message = "the broker shut down before the task finished; retry once it is back"
        for number in Array(services.known) {
            while let task = popWaiting(number) { fail(task, .brokerShuttingDown, message, into: &actions) }
        }
        for (peer, record) in workers {
            for (_, held) in deliveries.held(anchor: record.anchor) where !held.answered {
                fail(held.task, .brokerShuttingDown, message, worker: peer, into: &actions)
            }
            actions.append(.sendToWorker(peer, .disconnect))
        }
        withJobs(now: now, into: &actions) { $0.shutdown(message, into: &$1) }
        removeAllWorkers()
        services.updateAll(keeping: queue.hasEntries) { $1.workers.removeAll() }
        tasks.removeAll()
        deliveries = DeliveryBook()
        queue.removeAll()
        leases = ExpiryQueue()
        unserved = Heap()
        actions.append(.log(.info, "stopping: answered waiting and running requests, told the workers"))
    }
}
