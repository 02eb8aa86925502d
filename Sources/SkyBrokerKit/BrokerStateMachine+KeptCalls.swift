import DequeModule
import SkyProtocol

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
/// Until then nothing is written, so a broker that dies before loses the call as any call.
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
        guard let place = tasks[key] else { return .notAsked }
        let peer = clients.record(key.client)?.peer
        let caller = peer.map { JobCaller(peer: $0, requestID: key.requestID, attempt: attempt) }
        switch place.kind {
        case .waiting(let arrival):
            guard let task = waitingRequest(arrival: arrival), !task.dropped, task.request.header.keepIfAbandoned
            else { return .notAsked }
            if let refusal = refusal(task, now: now, into: &actions) { return .refused(refusal) }
            dropWaiting(key, arrival: arrival)
            finishRequest(key.client)
            withJobs(now: now, into: &actions) { $0.keep(task.request, at: .waiting, caller: caller, into: &$1) }
        case .running(let tag):
            guard let held = deliveries[tag], !held.answered, held.task.request.header.keepIfAbandoned else {
                return .notAsked
            }
            if let refusal = refusal(held.task, now: now, into: &actions) { return .refused(refusal) }
            // The delivery goes on as the job's first attempt: its worker's reply finds the job.
            tasks[key] = nil
            deliveries.update(tag) { held in
                held.task.client = Self.jobsClient
                held.task.request.header.keepIfAbandoned = false
                held.task.request.header.timeoutMilliseconds = 0
            }
            tasks[TaskKey(client: Self.jobsClient, requestID: key.requestID)] = .running(tag: tag)
            clients.addJobDelivery()
            finishRequest(key.client)
            let worker = deliveries.worker(of: tag).flatMap { workers[$0]?.name } ?? ""
            withJobs(now: now, into: &actions) {
                $0.keep(held.task.request, at: .running(tag: tag), caller: caller, worker: worker, into: &$1)
            }
        }
        return .kept
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

    /// A kept call's reply went to its client: remembered for ``keptReplyMemory``, in case the
    /// send fails (``keepUndelivered(_:frames:now:into:)``).
    mutating func rememberKeptReply(to request: TaskRequest, of client: ClientNumber, now: Instant) {
        guard let peer = clients.record(client)?.peer else { return }
        keptReplies.remember(KeptReplies.Entry(peer: peer, request: request, at: ticks(now)))
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
        withJobs(now: now, into: &actions) {
            $0.keep(entry.request, at: .ended(reply.status), reply: reply, caller: nil, into: &$1)
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
