import SkyJournal
import SkyProtocol

extension JobScheduler {
    /// Where a job the broker holds stands.
    func report(_ job: JobBook.Job) -> JobReport {
        let service = job.submission.service
        switch job.phase {
        case .scheduled:
            return JobReport(
                state: .scheduled, attempt: job.attempt, notBeforeMilliseconds: job.notBefore, service: service)
        case .queued:
            return JobReport(state: .queued, attempt: job.attempt, service: service)
        case .preparing, .prepared:
            // Its delivery is recorded but has not reached a worker.
            return JobReport(state: .queued, attempt: job.attempt - 1, service: service)
        case .running(_, let worker):
            return JobReport(state: .running, attempt: job.attempt, worker: worker, service: service)
        case .finishing(let report):
            // Its outcome is not on disk yet: callers hear it only once it is.
            return JobReport(
                state: job.startedAt > 0 ? .running : .queued, attempt: report.attempt, service: service)
        }
    }

    /// A job as the journal has it, as a report.
    static func report(_ record: JobRecord) -> JobReport {
        let state: JobState =
            switch record.state {
            case .queued: record.notBefore > 0 ? .scheduled : .queued
            case .running: .running
            case .succeeded: .succeeded
            case .failed: .failed
            case .cancelled: .cancelled
            }
        let outcome = record.outcome ?? []
        return JobReport(
            state: state, attempt: UInt32(clamping: record.attempt), notBeforeMilliseconds: record.notBefore,
            outcomeStatus: outcome.first.flatMap(ReplyStatus.init(rawValue:)) ?? .ok, service: record.service,
            outcome: Array(outcome.dropFirst()))
    }

    /// A journal's state as a job's (a queued job may be scheduled: the record says which).
    static func report(_ state: JobRecord.State) -> JobState {
        switch state {
        case .queued: .queued
        case .running: .running
        case .succeeded: .succeeded
        case .failed: .failed
        case .cancelled: .cancelled
        }
    }

    static func journalState(_ state: JobState) -> JobRecord.State? {
        switch state {
        case .queued, .scheduled: .queued
        case .running: .running
        case .succeeded: .succeeded
        case .failed: .failed
        case .cancelled: .cancelled
        case .unknown: nil
        }
    }

    /// When a job's record may go: its retention after `wall`.
    /// When an ended job's outcome expires: after its retention, and a failed one not before
    /// `--failed-retention`.
    func expiry(of submission: JobSubmission, ended state: JobState) -> Int64 {
        let wall = configuration.wallClock()
        let own = Self.expiry(wall, submission)
        guard state == .failed else { return own }
        let (kept, overflow) = wall.addingReportingOverflow(configuration.failedRetention)
        return max(own, overflow ? Int64.max : kept)
    }

    static func expiry(_ wall: Int64, _ submission: JobSubmission) -> Int64 {
        let (sum, overflow) = wall.addingReportingOverflow(Int64(clamping: submission.retentionMilliseconds))
        return overflow ? Int64.max : sum
    }
}
