import Foundation
import Logging
import SkyJSON
import SkyProtocol

/// Durable jobs: work the broker keeps (in its journal) until it is done, whatever happens to
/// the client that submitted it. See docs/jobs.md.
extension SkyClient {
    /// Records a job at the broker and returns once it is on the broker's disk.
    ///
    /// Without an ``JobOptions/idempotencyKey`` the call makes one of its own, so that its
    /// retries (a lost connection, a timeout) never make a second job.
    /// - Throws: ``SkyError/journalUnavailable(_:)`` if the broker cannot record jobs (no
    ///   `--state-dir`, disk full, its store out of reach) or did not confirm the job within
    ///   ``JobOptions/confirmWithin`` (it may still be recorded: the message names the
    ///   idempotency key to submit it again with), ``SkyError/overloaded(_:)`` over
    ///   `--journal-max-bytes`.
    public nonisolated func submit<T: SkyTask>(
        _ task: T, options: JobOptions = JobOptions(), coder: some TaskCoder = .json
    ) async throws -> Job<T> {
        let body: [UInt8]
        do {
            body = try coder.encode(task)
        } catch {
            throw SkyError.invalidTask("the task could not be encoded: \(error)")
        }
        return Job(id: try await submit(service: T.service, body: body, options: options), client: self)
    }

    /// Records a job of `service` whose task is already encoded (`body`, as its handler
    /// decodes it): for tools that hold no task type (`skyctl jobs submit`). As
    /// ``submit(_:options:coder:)`` otherwise.
    /// - Returns: the job's id, once it is on the broker's disk.
    public nonisolated func submit(
        service: String, body: [UInt8], options: JobOptions = JobOptions()
    ) async throws -> JobID {
        if let problem = WireFormat.nameProblem(service, what: "service name") {
            throw SkyError.invalidTask(problem)
        }
        if options.unique != nil, options.idempotencyKey == nil {
            throw SkyError.invalidTask(
                "a unique job needs its key: JobOptions(idempotencyKey: \"…\", unique: .whileRunning)")
        }
        let key = options.idempotencyKey ?? shell.callKey()
        var confirming = false
        // Asking what the broker takes waits up to the connect timeout, as an attempt does: a
        // question nobody answered counts as the first attempt, so that a submit to a broker
        // that is down fails after the policy's attempts, not one connect timeout more.
        var attemptsSpent = 0
        if options.confirmWithin != nil || options.unique != nil || options.concurrencyKey != nil {
            let features: BrokerFeatures?
            if let known = shell.lastFeatures.withLock({ $0 }) {
                features = known
            } else {
                features = await brokerFeatures()
                if features == nil {
                    // A unique or keyed job needs a newer submission than version 1: taken for a
                    // broker's answer, silence said "upgrade the broker".
                    if options.unique != nil || options.concurrencyKey != nil {
                        throw silentBroker(needing: "job-submission=\(JobSubmission.keyHoldVersion) or later")
                    }
                    attemptsSpent = 1
                }
            }
            let version = features?.jobSubmissionVersion ?? 1
            for (asked, needed, what) in [
                (options.unique != nil, JobSubmission.keyHoldVersion, "a unique job"),
                (options.concurrencyKey != nil, JobSubmission.newestVersion, "a concurrency key"),
            ] where asked && version < Int(needed) {
                throw SkyError.invalidTask(
                    "\(what) needs a broker that reads job submissions of version \(needed) (job-submission=\(needed) in mmi.features), and this one reads \(version); upgrade the broker"
                )
            }
            confirming = version >= Int(JobSubmission.confirmingVersion)
        }
        let submission = try options.submission(service: service, body: body, key: key, confirming: confirming)
        let reply: [UInt8]
        do {
            reply = try await jobCall(BrokerService.jobSubmit, submission.encode(), attemptsSpent: attemptsSpent)
        } catch SkyError.journalUnavailable(let message) where options.idempotencyKey == nil {
            // The key was this call's own: name it, so that a retry can make sure of one job.
            throw SkyError.journalUnavailable("\(message) (this submit's idempotency key: \(key))")
        } catch SkyError.invalidPayload(let message) {
            // The broker refused the submission itself (a reserved key, say): no worker saw the
            // task, and invalidPayload's advice (client and worker disagree on the type) would
            // mislead.
            throw SkyError.invalidTask(message)
        }
        guard let id = JobID(bytes: reply) else {
            throw SkyError.internalError("the broker answered a submit with \(reply.count) bytes, not a job id")
        }
        return id
    }

    /// A handle on a job submitted earlier, maybe by another process.
    public nonisolated func job<T: SkyTask>(_ id: JobID, as type: T.Type = T.self) -> Job<T> {
        Job(id: id, client: self)
    }

    /// Waits for a job to end and returns its result, decoded as `type`.
    ///
    /// Once this client has reached the broker, the wait rides out the broker's restarts and
    /// outages, however long (the job lives on in its journal): it asks again every few seconds
    /// and logs when it starts and ends. Cancel the waiting task to stop sooner. A broker never reached
    /// (a wrong endpoint) fails the wait as any call.
    public nonisolated func result<R: Decodable & Sendable>(
        of id: JobID, as type: R.Type, coder: some TaskCoder = .json
    ) async throws -> R {
        // A broker that answers "not yet" at once (it holds as many waits as it may) is asked
        // again after a pause, growing to a second: at once, the loop would flood it.
        var pause = Duration.milliseconds(50)
        var outage: (since: Duration, pause: Duration)?
        while true {
            let asked = time.now()
            let report: JobReport
            do {
                report = try await jobReport(BrokerService.jobWait, id)
            } catch let error as SkyError where error.isOutage && hasReachedBroker {
                // Each wait call retried by the client's policy already: the broker is down or
                // stalled for longer. Waited out, a pause growing to 5 s between the asks.
                let now = time.now()
                if outage == nil {
                    configuration.logger.warning(
                        "waiting out a broker outage for a job's result",
                        metadata: ["job": "\(id)", "error": "\(error)"])
                }
                let next = outage.map { min($0.pause * 2, .seconds(5)) } ?? .seconds(1)
                outage = (outage?.since ?? now, next)
                try await Task.sleep(for: next, clock: configuration.clock)
                continue
            }
            if let since = outage?.since {
                configuration.logger.notice(
                    "the broker answers again about a job",
                    // From the first ask that gave up, to this answer (a held wait answers when
                    // the job ends): not the broker's downtime, which the client cannot see.
                    metadata: ["job": "\(id)", "waitedOut": "\(time.now() - since)"])
                outage = nil
            }
            switch report.state {
            case .succeeded:
                do {
                    return try coder.decode(R.self, from: report.outcome)
                } catch {
                    throw SkyError.invalidResult(String(describing: error))
                }
            case .failed, .cancelled:
                if case .failed(let error, _) = JobStatus(report) { throw error }
                throw SkyError.cancelled("job \(id) was cancelled")
            case .unknown:
                throw SkyError.jobNotFound(id)
            case .queued, .scheduled, .running:
                // The broker held the wait as long as it holds one: ask again.
                guard time.now() - asked < .milliseconds(500) else {
                    pause = .milliseconds(50)
                    continue
                }
                try await Task.sleep(for: pause, clock: configuration.clock)
                pause = min(pause * 2, .seconds(1))
            }
        }
    }

    /// Where a job stands now.
    public nonisolated func status(of id: JobID) async throws -> JobStatus {
        JobStatus(try await jobReport(BrokerService.jobStatus, id))
    }

    /// Everything the broker knows of a job: where it stands, its options, its times (submitted,
    /// started, ended), its worker, its error or result size, and the retries that link it to
    /// other jobs (docs/jobs.md, "Operating"). Read from the broker's journal.
    /// - Throws: ``SkyError/invalidTask(_:)`` from a broker that does not describe jobs (no
    ///   `job-details` in `mmi.features`); ``SkyError/journalUnavailable(_:)`` from one without a
    ///   journal.
    public nonisolated func details(of id: JobID) async throws -> JobDetails {
        let reply = try await operatorCommand(
            BrokerService.jobDescribe, service: nil, body: id.bytes, feature: \.describesJobs,
            featureName: BrokerFeatures.jobDetailsFeature, lacking: "describe jobs")
        do {
            return try CanonicalJSON.decode(JobDetails.self, from: reply)
        } catch {
            throw SkyError.internalError("the broker's job details are malformed: \(error)")
        }
    }

    /// Cancels a job that has not ended: a queued or scheduled one never runs, a running one's
    /// handler is cancelled. A job that ended keeps its outcome.
    /// - Returns: the job's status after the cancel (``JobStatus/cancelled``, or how it ended).
    @discardableResult
    public nonisolated func cancel(job id: JobID) async throws -> JobStatus {
        JobStatus(try await jobReport(BrokerService.jobCancel, id))
    }

    /// Runs a failed or cancelled job again, as a new job with the same task and options.
    /// - Returns: the new job's id.
    /// - Throws: ``SkyError/invalidTask(_:)`` naming the job's state if it is not failed or
    ///   cancelled (unknown, running, succeeded, ...).
    public nonisolated func retry(job id: JobID) async throws -> JobID {
        let reply: [UInt8]
        do {
            reply = try await jobCall(BrokerService.jobRetry, id.bytes)
        } catch SkyError.invalidPayload(let message) {
            // The broker's answer for a job it may not retry; invalidPayload's advice (matching
            // task types) would mislead.
            throw SkyError.invalidTask(message)
        }
        guard let new = JobID(bytes: reply) else {
            throw SkyError.internalError("the broker answered a retry with \(reply.count) bytes, not a job id")
        }
        return new
    }

    /// Jobs the broker's journal holds, newest first (at most 1,000).
    /// - Throws: ``SkyError/invalidTask(_:)`` for a `service` no job can have (the broker
    ///   answered it `invalidPayload`, whose advice is about mismatched task types).
    public nonisolated func jobs(
        state: JobState? = nil, service: String? = nil, limit: Int = 100
    ) async throws -> [(id: JobID, service: String, status: JobStatus)] {
        try await jobPage(state: state, service: service, limit: limit).jobs
    }

    /// A page of jobs, as ``jobs(state:service:limit:)`` lists them, and how many matched
    /// (counted up to 100,000; `nil` from a broker that does not count).
    public nonisolated func jobPage(
        state: JobState? = nil, service: String? = nil, limit: Int = 100
    ) async throws -> (jobs: [(id: JobID, service: String, status: JobStatus)], matched: Int?) {
        if let service, let problem = WireFormat.nameProblem(service, what: "service name") {
            throw SkyError.invalidTask(problem)
        }
        let query = JobQuery(state: state, service: service, limit: UInt32(clamping: max(0, limit)))
        let reply = try await jobCall(BrokerService.jobList, query.encode())
        do {
            let listing = try JobListing(decoding: reply)
            return (listing.jobs.map { ($0.id, $0.report.service, JobStatus($0.report)) }, listing.matched)
        } catch {
            throw SkyError.internalError("the broker's job listing is malformed: \(error)")
        }
    }

    private nonisolated func jobReport(_ service: String, _ id: JobID) async throws -> JobReport {
        let reply = try await jobCall(service, id.bytes)
        do {
            return try JobReport(decoding: reply)
        } catch {
            throw SkyError.internalError("the broker's answer about job \(id) is malformed: \(error)")
        }
    }

    /// One request to the broker's job service. The timeout leaves a held wait room to end.
    /// - Parameter attemptsSpent: attempts of the retry policy already used up (a question
    ///   to the broker nobody answered); with none left, the call fails as that silence.
    nonisolated func jobCall(_ service: String, _ body: [UInt8], attemptsSpent: Int = 0) async throws -> [UInt8] {
        // The client's default retry policy (``Configuration/defaults``): a service keeps the
        // default and rides out a broker restart; an operator's tool fails at once.
        // No deadline: a held wait is bounded by the broker's hold, and the retries ride out a restart.
        var retry = configuration.defaults.retry
        retry.maxAttempts -= attemptsSpent
        guard retry.maxAttempts >= 1 else { throw silentBroker() }
        let options = ScanOptions(
            timeout: BrokerService.jobWaitHold + .seconds(10), deadline: nil, retry: retry, coalesce: false)
        // A submit or a retry is traced: the job's executions join the caller's trace.
        if let tracer, service == BrokerService.jobSubmit || service == BrokerService.jobRetry {
            return try await withCallSpan(service: service, tracer: tracer) { frame in
                try await self.executeRemotely(service: service, body: body, options: options, trace: frame)
            }.result.get()
        }
        return try await executeRemotely(service: service, body: body, options: options).result.get()
    }
}
