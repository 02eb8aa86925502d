import SkyJournal
import SkyProtocol

/// Bulk actions (`mmi.jobs.bulk`): count, retry, cancel or delete the jobs a filter selects.
/// One runs at a time. The journal selects the jobs (oldest first, at most
/// ``BulkAction/maxJobs``, each with its error's type); then a count is answered at once, a
/// cancel acts on the selected jobs the broker holds, a delete writes one transaction, and a
/// retry reads the selected jobs' records a batch at a time and submits each again.
extension JobScheduler {
    /// A bulk action under way.
    struct BulkRun: Sendable {
        var caller: JobCaller
        var kind: BulkAction.Kind
        var outcome: BulkOutcome
        /// For a retry: the jobs whose records are still to be read.
        var toRead: [JobID] = []
    }

    /// Records a retry reads at a time: bounds the bodies in memory at once.
    static let bulkReadBatch = 256
    /// Error types an answer counts, the most frequent first.
    static let bulkErrorTypes = 100
    /// The idempotency key of a bulk retry's job: a job is retried once by bulk actions (a
    /// second one finds the job the first made, while that is kept), and the new job names
    /// the one it repeats.
    static let retryKeyPrefix = "sky.retry/"

    mutating func bulkRequest(_ request: TaskRequest, from caller: JobCaller, into actions: inout [Action]) {
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        let action: BulkAction
        do {
            action = try BulkAction(decoding: request.body)
        } catch {
            answer(caller, .invalidPayload, "\(request.service): \(error)", into: &actions)
            return
        }
        if action.filter.selectsAll && !action.all && action.kind != .count {
            answer(
                caller, .invalidPayload,
                "\(request.service): a \(action.kind) with no filter acts on every job; give a state, service, time or error type, or say all (skyctl: --all)",
                into: &actions)
            return
        }
        if var run = bulk, run.caller.peer == caller.peer, run.caller.requestID == caller.requestID {
            // The caller asked again (its attempt timed out): the answer goes to its newest attempt.
            run.caller.attempt = max(run.caller.attempt, caller.attempt)
            bulk = run
            return
        }
        if let bulk {
            answer(
                caller, .overloaded,
                "a bulk \(bulk.kind) is under way (one at a time); try again once it has been answered",
                into: &actions)
            return
        }
        guard startRead(for: caller, into: &actions) else { return }
        bulk = BulkRun(caller: caller, kind: action.kind, outcome: BulkOutcome(matched: 0, acted: 0))
        let filter = action.filter
        actions.append(
            .journal(
                .select(
                    JobSelection(
                        state: filter.state.flatMap(Self.journalState), service: filter.service,
                        submittedAfter: filter.submittedAfter, submittedBefore: filter.submittedBefore),
                    errorType: filter.errorType, caller)))
    }

    /// The journal selected the jobs of the bulk action under way.
    mutating func bulkSelected(_ result: Result<BulkSelection, JournalError>, into actions: inout [Action]) {
        guard var run = bulk else { return }
        let selection: BulkSelection
        switch result {
        case .failure(let error):
            bulk = nil
            answer(run.caller, .journalUnavailable, error.description, into: &actions)
            return
        case .success(let found):
            selection = found
        }
        run.outcome = BulkOutcome(
            matched: selection.jobs.count, acted: 0, left: selection.left,
            errorTypes: Self.counted(selection.jobs.compactMap(\.errorType)))
        switch run.kind {
        case .count:
            endBulk(run, into: &actions)
        case .cancel:
            for job in selection.jobs where !job.state.isFinished {
                // Held and not ending already (its outcome being written), or a flow under way.
                if let held = book.jobs[job.id] {
                    if case .finishing = held.phase { continue }
                } else if flows.runs[job.id] == nil {
                    continue
                }
                cancel(job.id, caller: nil, into: &actions)
                run.outcome.acted += 1
            }
            endBulk(run, into: &actions)
        case .delete:
            // An ended job the broker holds no more; not a step of a flow that goes on, whose
            // flow reads its steps' outcomes.
            let ids = selection.jobs.filter { job in
                guard job.state.isFinished, book.jobs[job.id] == nil, flows.runs[job.id] == nil else { return false }
                guard let step = job.idempotencyKey.flatMap(FlowSpec.step(ofKey:)) else { return true }
                return flows.runs[step.flow] == nil
            }.map(\.id)
            run.outcome.acted = ids.count
            guard !ids.isEmpty else {
                endBulk(run, into: &actions)
                return
            }
            bulk = run
            actions.append(.journal(.write(ids.map { .deleted(id: $0.bytes) }, .bulkDeleted)))
        case .retry:
            run.toRead = selection.jobs.filter { job in
                (job.state == .failed || job.state == .cancelled) && job.service != FlowSpec.service
            }.map(\.id)
            bulk = run
            readForRetry(into: &actions)
        }
    }

    /// The bulk delete's transaction is on disk, or failed.
    mutating func bulkDeleted(_ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]) {
        guard let run = bulk else { return }
        if case .failure(let error) = result {
            bulk = nil
            answer(run.caller, .journalUnavailable, "nothing was deleted: \(error)", into: &actions)
            return
        }
        endBulk(run, into: &actions)
    }

    /// The records of a batch of jobs to retry: each is submitted again, once (those retried
    /// by a bulk retry, or a first `mmi.jobs.retry`, before are left: their job from then stands).
    mutating func bulkRead(_ result: Result<BulkRead, JournalError>, into actions: inout [Action]) {
        guard var run = bulk, run.kind == .retry else { return }
        switch result {
        case .failure(let error):
            bulk = nil
            answer(
                run.caller, .journalUnavailable,
                "retried \(run.outcome.acted) of \(run.outcome.matched) jobs, then: \(error)", into: &actions)
            return
        case .success(let read):
            run.outcome.retriedBefore += read.retriedBefore
            for record in read.records {
                guard book.overLimit == false else {
                    bulk = nil
                    answer(
                        run.caller, .overloaded,
                        "retried \(run.outcome.acted) of \(run.outcome.matched) jobs; the broker takes no new jobs now (its journal is full)",
                        into: &actions)
                    return
                }
                guard let id = JobID(bytes: record.id), var submission = resubmission(of: record) else { continue }
                submission.idempotencyKey = Self.retryKeyPrefix + id.description
                let (newID, written) = pend(submission, waiter: nil)
                actions.append(.journal(.write([.submitted(written)], .submitted(newID))))
                run.outcome.acted += 1
            }
        }
        bulk = run
        readForRetry(into: &actions)
    }

    /// Asks for the next batch of a retry's records, or answers once none is left.
    private mutating func readForRetry(into actions: inout [Action]) {
        guard var run = bulk else { return }
        guard !run.toRead.isEmpty else {
            endBulk(run, into: &actions)
            return
        }
        let batch = Array(run.toRead.prefix(Self.bulkReadBatch))
        run.toRead.removeFirst(batch.count)
        bulk = run
        actions.append(.journal(.read(batch)))
    }

    private mutating func endBulk(_ run: BulkRun, into actions: inout [Action]) {
        bulk = nil
        actions.append(
            .answer(
                run.caller,
                TaskReply(
                    requestID: run.caller.requestID, attempt: run.caller.attempt, status: .ok,
                    body: run.outcome.encode())))
    }

    /// A failed or cancelled job's submission, to run it again (as `mmi.jobs.retry` does): its
    /// task and options, without its key, delay or start time.
    func resubmission(of record: JobRecord) -> JobSubmission? {
        guard record.service != FlowSpec.service, record.state == .failed || record.state == .cancelled,
            var submission = try? JobSubmission(decoding: record.options)
        else { return nil }
        submission.body = record.body
        submission.idempotencyKey = nil
        submission.delayMilliseconds = 0
        submission.notBeforeMilliseconds = 0
        return submission
    }

    /// Each type and how often it came, the most frequent first (then by name), at most
    /// ``bulkErrorTypes``.
    static func counted(_ types: [String]) -> [(type: String, count: Int)] {
        var counts: [String: Int] = [:]
        for type in types { counts[type, default: 0] += 1 }
        return counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
            .prefix(bulkErrorTypes).map { ($0.key, $0.value) }
    }
}

/// What the journal selected for a bulk action (``JournalWork/select(_:errorType:_:)``).
package struct BulkSelection: Sendable, Equatable {
    package struct Job: Sendable, Equatable {
        package var id: JobID
        package var state: JobState
        package var service: String
        package var idempotencyKey: String?
        /// A failed or cancelled job's error type.
        package var errorType: String?
    }

    /// The selected jobs, oldest first, at most ``BulkAction/maxJobs``.
    package var jobs: [Job]
    /// Jobs that also matched beyond them (counted up to ``BulkAction/maxJobs`` more).
    package var left: Int

    /// Pages through the store's matches (a thousand at a time, so that the outcomes read stay
    /// few), keeps those with an error of `errorType` if given, the first ``BulkAction/maxJobs``,
    /// and counts up to as many more.
    package static func select(
        _ selection: JobSelection, errorType: String?, from store: some JobStore
    ) throws(JournalError) -> BulkSelection {
        var found = BulkSelection(jobs: [], left: 0)
        var after: Int64 = 0
        while found.left < BulkAction.maxJobs {
            let page = try store.select(selection, after: after, limit: 1000)
            for match in page {
                guard let id = JobID(bytes: match.id) else { continue }
                let type = match.outcome.map(Self.errorType(ofOutcome:))
                if let errorType, type != errorType { continue }
                if found.jobs.count < BulkAction.maxJobs {
                    found.jobs.append(
                        Job(
                            id: id, state: JobScheduler.report(match.state), service: match.service,
                            idempotencyKey: match.idempotencyKey, errorType: type))
                } else {
                    found.left += 1
                }
            }
            guard let last = page.last, page.count == 1000 else { break }
            after = last.seq
        }
        return found
    }

    /// The `type` of a failed or cancelled job's error: its outcome is the status byte, then
    /// the error body.
    static func errorType(ofOutcome outcome: [UInt8]) -> String {
        guard let status = outcome.first else { return "unknown" }
        let body = Array(outcome.dropFirst())
        guard !body.isEmpty else { return ReplyStatus(rawValue: status)?.description ?? "unknown" }
        return RemoteErrorBody(decoding: body).type
    }
}

/// A bulk retry's batch as the journal read it (``JournalWork/read(_:)``): the records of the
/// jobs to run again, without those a bulk retry ran again before (their retry's key is held).
package struct BulkRead: Sendable, Equatable {
    package var records: [JobRecord]
    package var retriedBefore: Int

    package static func read(_ ids: [JobID], from store: some JobStore) throws(JournalError) -> BulkRead {
        // The keys in one lookup (one statement on PostgreSQL), not one a job.
        let taken = Set(
            try store.jobs(idempotencyKeys: ids.map { JobScheduler.retryKeyPrefix + $0.description })
                .compactMap(\.idempotencyKey))
        var read = BulkRead(records: [], retriedBefore: 0)
        for id in ids {
            guard let record = try store.job(id.bytes) else { continue }
            if taken.contains(JobScheduler.retryKeyPrefix + id.description) {
                read.retriedBefore += 1
            } else {
                read.records.append(record)
            }
        }
        return read
    }
}
