import HeapModule
import SkyJournal
import SkyProtocol

/// Calls that outlive their caller: a REQUEST that asked to be kept
/// (``RequestHeader/keepIfAbandoned``) becomes a job when its caller leaves it (a CANCEL, its
/// deadline, or a reply that finds no client), under the request id as the job's id. Until then
/// it costs what any call costs: nothing is written.
///
/// The job is a job from its record on: it waits, runs and ends as one, and its outcome is kept
/// for a day. A call kept while a worker runs it goes on there: the delivery becomes the job's
/// first attempt (``BrokerStateMachine/keepAbandoned(_:answering:now:into:)`` moves it), so the
/// handler is not run twice for it.
extension JobScheduler {
    /// Why a call cannot become job `id` now, if it cannot.
    func keepRefusal(_ id: JobID) -> String? {
        if !configuration.journal { return "this broker keeps no journal (--state-dir none)" }
        if stopping { return "the broker is stopping" }
        if knows(id) { return "its request id is a job's id already" }
        if book.overLimit { return "the journal is over --journal-max-bytes" }
        if book.jobs.count >= configuration.maxHeldJobs || book.heldBytes >= configuration.maxHeldJobBytes {
            return "the broker holds as many unfinished jobs as it may"
        }
        return nil
    }

    /// Whether `id` is a job or flow held in memory, or one being recorded.
    func knows(_ id: JobID) -> Bool {
        book.jobs[id] != nil || book.pendingSubmits[id] != nil || flows.runs[id] != nil
    }

    /// A caller that waited (`mmi.jobs.wait`) on a kept call in flight, which was just kept as
    /// job `id`: it waits on for the job, whose record may not be on disk yet.
    mutating func holdForKeptJob(_ id: JobID, _ waiter: JobCaller, now: Int64) {
        guard book.addWaiter(waiter, for: id) else { return }
        book.timers.insert(JobBook.TimerEntry(due: now + configuration.waitHold, id: id, kind: .hold(waiter)))
    }

    /// Records `request`, whose caller left it, as a job whose id is its request id; `caller`
    /// (if still there) is answered ``ReplyStatus/keptAsJob`` once it is on disk. The caller
    /// checked ``keepRefusal(_:)``.
    /// - Parameters:
    ///   - reply: for ``JobBook/KeptCall/ended``, the answer its client did not take.
    ///   - ago: when it arrived, started and ended, for its record.
    mutating func keep(
        _ request: TaskRequest, at place: JobBook.KeptCall, reply: TaskReply? = nil, caller: JobCaller?,
        worker: String = "", ago: JobBook.KeptCallTimes = .init(), into actions: inout [Action]
    ) {
        let id = JobID(request.requestID)
        var submission = JobSubmission(service: request.service, body: request.body)
        submission.priority = request.header.priority
        submission.concurrencyKey = request.concurrencyKey
        submission.concurrencyLimit = request.concurrencyKey == nil ? 0 : request.concurrencyLimit
        // It ran, or runs, once as a call: the broker's own re-dispatch of lost work is its retry.
        submission.maxAttempts = 1
        var (_, record) = pend(submission, id: id, trace: request.trace, waiter: caller, mayStart: false)
        let wall = configuration.wallClock()
        func time(_ ago: Int64?) -> Int64 { ago.map { wall - max($0, 0) } ?? 0 }
        record.submittedAt = time(ago.arrived)
        book.pendingSubmits[id]?.kept = place
        switch place {
        case .waiting:
            break
        case .running(let tag):
            record.state = .running
            record.attempt = 1
            record.startedAt = time(ago.started)
            // Held from now: the worker's reply may come before the record is on disk.
            if var job = book.pendingSubmits[id]?.job {
                job.attempt = 1
                job.phase = .running(tag: tag, worker: worker)
                job.startedAt = record.startedAt
                book.hold(job)
            }
        case .ended(let status):
            record.state = status == .ok ? .succeeded : .failed
            record.attempt = 1
            record.outcome = [status.rawValue] + (reply?.body ?? [])
            record.startedAt = time(ago.started)
            record.endedAt = time(ago.ended)
            record.expiresAt = expiry(of: submission, ended: status == .ok ? .succeeded : .failed)
        }
        actions.append(.journal(.write([.submitted(record)], .submitted(id))))
    }

    /// A kept call's record is on disk, or not.
    mutating func keptCallSubmitted(
        _ id: JobID, _ pending: JobBook.PendingSubmit, _ place: JobBook.KeptCall,
        _ result: Result<JournalReceipt, JournalError>, now: Int64, into actions: inout [Action]
    ) {
        let problem: String?
        switch result {
        case .failure(let error): problem = error.description
        case .success(let receipt):
            problem = receipt.duplicates[id.bytes] == nil ? nil : "its request id is another job's id"
        }
        if let problem {
            actions.append(
                .log(
                    .warning, "a call its caller left could not be kept as a job; it is cancelled",
                    ["job": "\(id)", "service": pending.job.submission.service, "error": problem]))
            if case .running(let tag) = place {
                book.release(id)
                actions.append(.cancelAttempt(id, tag: tag))
            }
            let message =
                "the call was left by its caller and could not be kept as a job (\(problem)); it was cancelled"
            if let waiter = pending.waiter { answer(waiter, .cancelled, message, into: &actions) }
            let cancelled = JobReport(
                state: .cancelled, attempt: 1, outcomeStatus: .cancelled, service: pending.job.submission.service,
                outcome: RemoteErrorBody(type: "cancelled", message: message).encoded())
            for waiter in book.takeWaiters(of: id) { answer(waiter, cancelled, into: &actions) }
            return
        }
        book.submitted += 1
        if let waiter = pending.waiter {
            answer(
                waiter, .keptAsJob,
                "the call is kept as job \(id): read its outcome with mmi.jobs.status or mmi.jobs.wait", into: &actions)
        }
        var announced = pending.job
        announced.attempt = 0
        publish(.jobSubmitted, announced, status: nil, into: &actions)
        switch place {
        case .waiting:
            admit(pending.job, now: now, into: &actions)
        case .running:
            break
        case .ended(let status):
            announced.attempt = 1
            publish(book.ended.count(status == .ok ? .succeeded : .failed), announced, status: status, into: &actions)
        }
    }
}
