import DequeModule
import SkyProtocol
import SkyWire

/// Calls that outlive their caller, at the broker: what ``JobScheduler/keep(_:at:reply:caller:worker:into:)``
/// records, taken out of the request tables.
///
/// A request that asked to be kept (``RequestHeader/keepIfAbandoned``) becomes a job with its
/// request id as the job's id at the first of:
/// - its client's CANCEL (Sky's client sends one when the caller's deadline passes or its task
///   is cancelled): answered ``ReplyStatus/keptAsJob`` once the job is on disk;
/// - its deadline at the broker (`timeout-ms` after it arrived, without the lease grace: a
///   caller that went away silently);
/// - its reply finding no client (the client's connection is gone: the send fails), recorded
///   with that outcome.
///
/// Until then nothing is written, so a broker that dies before loses the call as any call. While
/// it is in flight, the job it may become is asked about by its id (``keptCalls``): a status
/// says where the call stands, and a wait is held until the call is answered (the waiter gets
/// its outcome) or kept (it waits on for the job).
extension BrokerStateMachine {
    /// Replies to kept calls remembered this long after they were sent: a send that fails
    /// comes back within an iteration or two of the event loop.
    static let keptReplyMemory: Int64 = 1_000_000_000

    /// Takes the request `key` (waiting or running) as a job, if it asked to be kept and the
    /// scheduler may take it; its client is answered with the job once it is on disk
    /// (`attempt`: the attempt the answer names; 0 for the answer to a CANCEL).
    /// - Returns: whether it was kept; else the caller ends it as it would any request, saying
    ///   why it was not kept if it asked to be.
    mutating func keepAbandoned(
        _ key: TaskKey, answering attempt: UInt32, now: Instant, into actions: inout [BrokerAction]
    ) -> KeepOutcome {
        guard let place = keptCallInFlight(key) else { return .notAsked }
        let peer = clients.record(key.client)?.peer
        let caller = peer.map { JobCaller(peer: $0, requestID: key.requestID, attempt: attempt) }
        switch place {
        case .waiting(let arrival, let task):
            if let refusal = refusal(task, now: now, into: &actions) { return .refused(refusal) }
            dropWaiting(key, arrival: arrival)
            finishRequest(key.client)
            let ago = JobBook.KeptCallTimes(arrived: millisecondsAgo(task.arrivedAt, now: ticks(now)))
            withJobs(now: now, into: &actions) {
                $0.keep(task.request, at: .waiting, caller: caller, ago: ago, into: &$1)
            }
            handOverWaiters(key, now: now, into: &actions)
        case .running(let tag, let held):
            if let refusal = refusal(held.task, now: now, into: &actions) { return .refused(refusal) }
            // The delivery goes on as the job's first attempt: its worker's reply finds the job.
            tasks[key] = nil
            if let jobKey = deliveries.update(
                tag,
                { held in
                    held.keepAsJob(client: Self.jobsClient)
                    return held.key
                })
            {
                tasks[jobKey] = .running(tag: tag)
            }
            clients.addJobDelivery()
            finishRequest(key.client)
            let worker = deliveries.worker(of: tag).flatMap { workers[$0]?.name } ?? ""
            let tick = ticks(now)
            let ago = JobBook.KeptCallTimes(
                arrived: millisecondsAgo(held.task.arrivedAt, now: tick),
                started: millisecondsAgo(held.task.arrivedAt + (held.waited ?? 0), now: tick))
            withJobs(now: now, into: &actions) {
                $0.keep(
                    held.task.request, at: .running(tag: tag), caller: caller, worker: worker, ago: ago, into: &$1)
            }
            handOverWaiters(key, now: now, into: &actions)
        }
        return .kept
    }

    /// The callers waiting on the kept call `key` wait on for the job it just became.
    private mutating func handOverWaiters(_ key: TaskKey, now: Instant, into actions: inout [BrokerAction]) {
        guard !keptCalls.isEmpty else { return }
        let id = JobID(key.requestID)
        let nowTicks = ticks(now)
        for waiter in keptCalls.remove(key.requestID, from: key.client)?.callers ?? [] {
            withJobs(now: now, into: &actions) { jobs, _ in jobs.holdForKeptJob(id, waiter, now: nowTicks) }
        }
    }

    /// Why a kept call of request id `id` from `peer` may not be taken, if it may not: its id
    /// names a job already, or another client's kept call in flight (the first keeps it), so
    /// that nobody's call can take over or answer for the job another's id names.
    func keptIDConflict(_ id: RequestID, from peer: PeerID) -> String? {
        if jobs.knows(JobID(id)) {
            return "the request id \(id) is job \(JobID(id))'s: a kept call needs an id of its own (JobID.random())"
        }
        guard let other = keptCalls.client(of: id), other != clients.number(of: peer),
            keptCallReport(id, of: other) != nil
        else { return nil }
        return
            "the request id \(id) is another client's kept call's, in flight: a kept call needs an id of its own (JobID.random())"
    }

    // MARK: Asked about while in flight

    /// A kept call arrived from `client`: indexed by its id alone, unless a live call of another
    /// client holds that id (the first keeps it).
    mutating func indexKeptCall(_ id: RequestID, from client: ClientNumber) {
        if let known = keptCalls.client(of: id), known != client, keptCallReport(id, of: known) != nil { return }
        keptCalls.add(id, from: client)
        if keptCalls.needsSweep {
            let stale = keptCalls.calls.compactMap { keptCallReport($0.key, of: $0.value) == nil ? $0.key : nil }
            keptCalls.sweep(removing: stale)
        }
    }

    /// Where the kept call `id` of `client` stands, as the report of the job it may become;
    /// `nil` if it is no longer in flight as a kept call.
    func keptCallReport(_ id: RequestID, of client: ClientNumber) -> JobReport? {
        switch keptCallInFlight(TaskKey(client: client, requestID: id)) {
        case nil: return nil
        case .waiting(_, let task)?: return JobReport(state: .queued, service: task.request.service)
        case .running(let tag, let held)?:
            let worker = deliveries.worker(of: tag).flatMap { workers[$0]?.name } ?? ""
            return JobReport(state: .running, attempt: 1, worker: worker, service: held.task.request.service)
        }
    }

    /// The details of the kept call `id` in flight, as `mmi.jobs.describe` gives a job's (from
    /// memory: nothing of it is on disk yet); `nil` if it names a job or no kept call in flight.
    func keptCallDetails(_ id: JobID) -> JobDetails? {
        let requestID = id.requestID
        guard let client = keptCalls.client(of: requestID), !jobs.knows(id),
            let report = keptCallReport(requestID, of: client),
            let place = keptCallInFlight(TaskKey(client: client, requestID: requestID))
        else { return nil }
        let request: TaskRequest =
            switch place {
            case .waiting(_, let task): task.request
            case .running(_, let held): held.task.request
            }
        var details = JobDetails(id: id.description, state: report.state.description)
        details.service = report.service
        details.attempt = Int(report.attempt)
        details.maxAttempts = 1
        details.priority = Int(request.header.priority)
        details.worker = report.worker.isEmpty ? nil : report.worker
        details.timeoutMilliseconds =
            request.header.timeoutMilliseconds > 0 ? Int(request.header.timeoutMilliseconds) : nil
        details.concurrencyKey = request.concurrencyKey
        details.concurrencyLimit = request.concurrencyLimit > 0 ? Int(request.concurrencyLimit) : nil
        return details
    }

    /// Answers `mmi.jobs.status` (`holding` false) or `mmi.jobs.wait` about `id` if it names no
    /// job but a kept call in flight; `false` otherwise (the scheduler answers).
    mutating func answerAboutKeptCall(
        _ id: JobID, holding: Bool, caller: JobCaller, now: Instant, into actions: inout [BrokerAction]
    ) -> Bool {
        let requestID = id.requestID
        guard let client = keptCalls.client(of: requestID), !jobs.knows(id) else { return false }
        guard let report = keptCallReport(requestID, of: client) else {
            keptCalls.forget(requestID)
            return false
        }
        if holding, keptCalls.holds(caller) {
            // Sent again while it waits: held, and answered, once.
            counters.duplicateRequests += 1
            return true
        }
        if holding,
            keptCalls.hold(
                caller, on: requestID, service: report.service, until: ticks(now) + jobs.configuration.waitHold)
        {
            return true
        }
        replyTo(caller.peer, Self.answer(caller, report), into: &actions)
        return true
    }

    /// A reply went to `client`: if it ended a kept call in flight, the callers waiting on it
    /// hear its outcome (the call ended as a call: no job is left under its id).
    mutating func keptCallAnswered(
        _ client: ClientNumber, _ reply: borrowing TaskReply, into actions: inout [BrokerAction]
    ) {
        guard let (service, waiters) = keptCalls.remove(reply.requestID, from: client) else { return }
        let state: JobState =
            switch reply.status {
            case .ok: .succeeded
            case .cancelled: .cancelled
            default: .failed
            }
        let report = JobReport(
            state: state, attempt: 1, outcomeStatus: reply.status, service: service, outcome: reply.body)
        for waiter in waiters { replyTo(waiter.peer, Self.answer(waiter, report), into: &actions) }
    }

    /// Callers whose hold on a kept call ran out: told where it stands, or (no longer in
    /// flight) answered by the scheduler as about any job.
    mutating func expireKeptCallHolds(now: Instant, into actions: inout [BrokerAction]) {
        let nowTicks = ticks(now)
        while let hold = keptCalls.nextDue(now: nowTicks) {
            if let client = keptCalls.client(of: hold.id), let report = keptCallReport(hold.id, of: client) {
                replyTo(hold.caller.peer, Self.answer(hold.caller, report), into: &actions)
            } else {
                withJobs(now: now, into: &actions) {
                    $0.answerAbout(JobID(hold.id), to: hold.caller, holding: nil, now: nowTicks, into: &$1)
                }
            }
        }
    }

    private static func answer(_ caller: JobCaller, _ report: JobReport) -> TaskReply {
        TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: report.encode())
    }

    /// Where a request that asked to be kept is, while it is in flight as a call.
    enum KeptCallPlace {
        case waiting(arrival: UInt64, QueuedRequest)
        case running(tag: UInt64, InFlightTask)
    }

    /// The request `key`, if it asked to be kept and is in flight as a call (not answered,
    /// dropped, or kept already).
    func keptCallInFlight(_ key: TaskKey) -> KeptCallPlace? {
        guard let place = tasks[key] else { return nil }
        switch place.kind {
        case .waiting(let arrival):
            guard let task = waitingRequest(arrival: arrival), !task.dropped, task.request.header.keepIfAbandoned
            else { return nil }
            return .waiting(arrival: arrival, task)
        case .running(let tag):
            guard let held = deliveries[tag], !held.answered, held.task.request.header.keepIfAbandoned else {
                return nil
            }
            return .running(tag: tag, held)
        }
    }

    /// What ``keepAbandoned(_:answering:now:into:)`` did.
    enum KeepOutcome: Equatable {
        case kept
        /// The request did not ask to be kept (or is no longer held).
        case notAsked
        /// It asked, but could not be kept: why.
        case refused(String)
    }

    /// Why the scheduler may not take `task` as a job now, if it may not; logged.
    private mutating func refusal(_ task: QueuedRequest, now: Instant, into actions: inout [BrokerAction]) -> String? {
        guard let refusal = jobs.keepRefusal(JobID(task.request.requestID)) else { return nil }
        logAboutPeer(
            .warning, "a call its caller left cannot be kept as a job; it ends as calls do", now: now, into: &actions
        ) {
            ["request": "\(task.request.requestID)", "service": task.request.service, "reason": refusal]
        }
        return refusal
    }

    /// How many milliseconds before `tick` the instant `at` was (both ``ticks(_:)``).
    private func millisecondsAgo(_ at: Int64, now tick: Int64) -> Int64 { (tick - at) / 1_000_000 }

    /// A kept call's reply went to its client: remembered for ``keptReplyMemory``, in case the
    /// send fails (``keepUndelivered(_:frames:now:into:)``).
    mutating func rememberKeptReply(to held: InFlightTask, of client: ClientNumber, now: Instant) {
        guard let peer = clients.record(client)?.peer else { return }
        keptReplies.remember(
            KeptReplies.Entry(
                peer: peer, request: held.task.request, arrivedAt: held.task.arrivedAt,
                startedAt: held.task.arrivedAt + (held.waited ?? 0), at: ticks(now)))
    }

    /// A reply the shell could not send to `peer` (its frames after the routing id): if it
    /// answered a kept call, the call is recorded as a job ended with that reply.
    mutating func keepUndelivered(_ peer: PeerID, frames: Frames, now: Instant, into actions: inout [BrokerAction]) {
        guard !keptReplies.isEmpty, let message = try? BrokerToClient.decode(frames) else { return }
        let reply: TaskReply
        switch message {
        case .reply(let sent), .packedReply(let sent): reply = sent
        }
        guard let entry = keptReplies.take(peer: peer, requestID: reply.requestID),
            jobs.keepRefusal(JobID(reply.requestID)) == nil
        else { return }
        let tick = ticks(now)
        let ago = JobBook.KeptCallTimes(
            arrived: millisecondsAgo(entry.arrivedAt, now: tick), started: millisecondsAgo(entry.startedAt, now: tick),
            ended: millisecondsAgo(entry.at, now: tick))
        withJobs(now: now, into: &actions) {
            $0.keep(entry.request, at: .ended(reply.status), reply: reply, caller: nil, ago: ago, into: &$1)
        }
    }
}

/// Replies to kept calls that were just sent, by client and request id; bounded in count, in
/// the bytes of the tasks it holds, and in time (``BrokerStateMachine/keptReplyMemory``). Looked
/// up by hash: a storm of undelivered replies costs one lookup each.
struct KeptReplies: Sendable {
    struct Entry: Sendable {
        var peer: PeerID
        /// The call: what the job is recorded with.
        var request: TaskRequest
        /// When it arrived and was handed to its worker, and when it was answered (``BrokerStateMachine/ticks(_:)``).
        var arrivedAt: Int64
        var startedAt: Int64
        var at: Int64
    }

    private struct Key: Hashable, Sendable {
        var peer: PeerID
        var requestID: RequestID
    }

    static let limit = 4096
    static let byteLimit = 64 << 20
    private var entries: [Key: Entry] = [:]
    /// Keys oldest first; a key taken meanwhile is skipped when it comes up.
    private var order: Deque<(key: Key, at: Int64)> = []
    private var bytes = 0

    var isEmpty: Bool { entries.isEmpty }

    mutating func remember(_ entry: Entry) {
        let key = Key(peer: entry.peer, requestID: entry.request.requestID)
        if let old = entries.updateValue(entry, forKey: key) { bytes -= old.request.queuedSize }
        bytes += entry.request.queuedSize
        order.append((key, entry.at))
        while entries.count > Self.limit || bytes > Self.byteLimit, let first = order.popFirst() {
            drop(first.key, at: first.at)
        }
    }

    mutating func take(peer: PeerID, requestID: RequestID) -> Entry? {
        guard let entry = entries.removeValue(forKey: Key(peer: peer, requestID: requestID)) else { return nil }
        bytes -= entry.request.queuedSize
        return entry
    }

    /// Forgets replies sent before `cutoff`.
    mutating func forget(before cutoff: Int64) {
        while let first = order.first, first.at < cutoff {
            order.removeFirst()
            drop(first.key, at: first.at)
        }
        if entries.isEmpty { order.removeAll() }
    }

    /// Drops the entry of `key` remembered at `at` (not a newer one of the same key).
    private mutating func drop(_ key: Key, at: Int64) {
        guard let entry = entries[key], entry.at == at else { return }
        entries[key] = nil
        bytes -= entry.request.queuedSize
    }
}
