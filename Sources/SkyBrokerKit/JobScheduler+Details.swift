import SkyJSON
import SkyJournal
import SkyProtocol

/// `mmi.jobs.describe`: everything the broker knows of one job, for an operator (`skyctl jobs
/// show`). The journal's record is read (a job is held only once it is on disk), and what the
/// broker holds of it in memory (where it stands, its worker) is laid over it.
extension JobScheduler {
    mutating func describe(_ body: [UInt8], caller: JobCaller, into actions: inout [Action]) {
        guard let id = JobID(bytes: body) else {
            answer(
                caller, .invalidPayload, "\(BrokerService.jobDescribe) takes a 16-byte job id; got \(body.count) bytes",
                into: &actions)
            return
        }
        guard configuration.journal else {
            answer(caller, .journalUnavailable, Self.noJournal, into: &actions)
            return
        }
        guard startRead(for: caller, into: &actions) else { return }
        actions.append(.journal(.describe(id, caller)))
    }

    /// The journal read the job's record (and its retry's, if any).
    mutating func described(
        _ id: JobID, _ caller: JobCaller, _ result: Result<(record: JobRecord?, retriedAs: JobRecord?), JournalError>,
        into actions: inout [Action]
    ) {
        let found: (record: JobRecord?, retriedAs: JobRecord?)
        switch result {
        case .success(let read): found = read
        case .failure(let error):
            answer(caller, .journalUnavailable, error.description, into: &actions)
            return
        }
        var details = found.record.map { Self.details(of: $0, id) } ?? JobDetails(id: id.description, state: "unknown")
        if let job = book.jobs[id] { overlay(job, on: &details) }
        details.retriedAs = found.retriedAs.flatMap { JobID(bytes: $0.id)?.description }
        guard let body = try? CanonicalJSON.encode(details) else {
            answer(caller, .internalError, "the job's details could not be encoded", into: &actions)
            return
        }
        actions.append(
            .answer(caller, TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: .ok, body: body)))
    }

    /// A job as its record has it.
    static func details(of record: JobRecord, _ id: JobID) -> JobDetails {
        let report = report(record)
        var details = JobDetails(id: id.description, state: report.state.description)
        details.service = record.service
        // A flow has no attempts of its own (its record's 1 only marks it started).
        details.attempt = record.service == FlowSpec.service ? nil : record.attempt
        details.priority = record.priority
        details.submittedAt = record.submittedAt
        details.notBefore = record.notBefore > 0 && !record.state.isFinished ? record.notBefore : nil
        details.startedAt = record.startedAt > 0 ? record.startedAt : nil
        details.endedAt = record.endedAt > 0 ? record.endedAt : nil
        details.idempotencyKey = record.idempotencyKey
        if let key = record.idempotencyKey, key.hasPrefix(retryKeyPrefix) {
            details.retryOf = String(key.dropFirst(retryKeyPrefix.count))
        }
        // A flow's record holds no job options of its own: it runs once, as its steps say.
        if record.service != FlowSpec.service, let options = try? JobSubmission(decoding: record.options) {
            details.maxAttempts = Int(options.maxAttempts)
            details.timeoutMilliseconds = options.timeoutMilliseconds > 0 ? Int(options.timeoutMilliseconds) : nil
            details.concurrencyKey = options.concurrencyKey
            details.concurrencyLimit = options.concurrencyLimit > 0 ? Int(options.concurrencyLimit) : nil
        }
        guard record.state.isFinished else { return details }
        if let stored = record.progress, let progress = JobProgress(decoding: stored) { details.show(progress) }
        details.expiresAt = record.expiresAt
        details.outcomeStatus = report.outcomeStatus.description
        if report.outcomeStatus == .ok {
            details.resultBytes = report.outcome.count
        } else {
            let error = RemoteErrorBody(decoding: report.outcome)
            details.errorType = error.type
            details.errorMessage = error.message
        }
        return details
    }

    /// What the broker holds of a job in memory, over its record: where it stands now.
    private func overlay(_ job: JobBook.Job, on details: inout JobDetails) {
        let now = report(job)
        details.state = now.state.description
        details.attempt = Int(now.attempt)
        details.worker = now.worker.isEmpty ? nil : now.worker
        details.notBefore = now.state == .scheduled ? job.notBefore : nil
        if case .running = job.phase, job.startedAt > 0 { details.startedAt = job.startedAt }
        if let progress = job.progress { details.show(progress) }
    }
}
