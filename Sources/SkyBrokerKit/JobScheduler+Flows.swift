import HeapModule
import SkyJournal
import SkyProtocol

/// Flows: `mmi.flows.*` requests, and the steps ``FlowRun`` decides on, made into jobs.
///
/// A flow is recorded as a job of its own (service ``FlowSpec/service``, its spec as the body,
/// `running` until it ends), which no worker serves: `mmi.jobs.status`, `.wait` and `.cancel`
/// take its id, and its outcome is kept as a job's. Each step is a job submitted once its input
/// is ready, with the idempotency key ``FlowSpec/stepKey(flow:step:)``: a broker that dies
/// between a step's end and its successor's submit submits the successor when it takes the
/// flow up again, and one that dies after finds the key taken. An ended step is kept as long as
/// its flow (``JobChange/retained(id:expiresAt:)``), since its record is the flow's memory of
/// it.
extension JobScheduler {
    // MARK: Requests

    mutating func flowRequest(_ request: TaskRequest, from caller: JobCaller, now: Int64, into actions: inout [Action])
    {
        guard takesRequests(answering: caller, into: &actions) else { return }
        if request.service == BrokerService.flowSubmit {
            submitFlow(request.body, caller: caller, into: &actions)
            return
        }
        guard let id = JobID(bytes: request.body) else {
            answer(
                caller, .invalidPayload,
                "\(request.service) takes a 16-byte flow id; got \(request.body.count) bytes", into: &actions)
            return
        }
        if let run = flows.runs[id] {
            answer(caller, id: run.status(state: flowReport(run).state, live: liveReport).encode(), into: &actions)
            return
        }
        if let status = flows.endedStatus(of: id) {
            answer(caller, id: status, into: &actions)
            return
        }
        guard startRead(for: caller, into: &actions) else { return }
        actions.append(.journal(.readFlow(id, caller)))
    }

    private mutating func submitFlow(_ body: [UInt8], caller: JobCaller, into actions: inout [Action]) {
        let spec: FlowSpec
        do {
            spec = try FlowSpec(decoding: body)
        } catch {
            answer(caller, .invalidPayload, "mmi.flows.submit: \(error)", into: &actions)
            return
        }
        if let key = spec.idempotencyKey, let held = flows.keys[key] {
            // A repeat of a flow the broker holds (or is writing: answered when it is on disk).
            if flows.pending[held] == nil {
                answer(caller, id: held.bytes, into: &actions)
                return
            }
            answer(caller, .overloaded, "the flow with this key is being written; ask again", into: &actions)
            return
        }
        let steps = spec.steps.count
        let pendingSteps = flows.pendingSteps
        if book.overLimit || book.jobs.count >= configuration.maxHeldJobs
            || flows.runs.count + flows.pending.count >= FlowBook.maxFlows
            || flows.heldSteps + pendingSteps + steps > FlowBook.maxHeldSteps
        {
            actions.append(.count(.refusedOverloaded))
            answer(
                caller, .overloaded,
                "the broker holds \(flows.runs.count + flows.pending.count) flows (\(flows.heldSteps + pendingSteps) steps; at most \(FlowBook.maxFlows) flows of \(FlowBook.maxHeldSteps) steps) and \(book.jobs.count) unfinished jobs: new flows are refused until some end",
                into: &actions)
            return
        }
        let wall = configuration.wallClock()
        let id = JobID(milliseconds: wall, random: &idGenerator)
        var options = JobSubmission(service: FlowSpec.service, body: [])
        options.retentionMilliseconds = spec.retentionMilliseconds
        // Kept until the flow ends: its outcome's retention starts then.
        let record = JobRecord(
            id: id.bytes, service: FlowSpec.service, body: spec.encode(), idempotencyKey: spec.idempotencyKey,
            state: .running, attempt: 1, expiresAt: Int64.max, submittedAt: wall, options: options.encode())
        flows.pend(id, FlowBook.Pending(spec: spec, caller: caller))
        actions.append(.journal(.write([.submitted(record)], .flowSubmitted(id))))
    }

    /// The flow's record is on disk (or not): its submitter hears, and its first steps go.
    mutating func flowRecorded(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]
    ) {
        guard let pending = flows.unpend(id) else { return }
        switch result {
        case .failure(let error):
            answer(pending.caller, .journalUnavailable, error.description, into: &actions)
        case .success(let receipt):
            if let first = receipt.duplicates[id.bytes] {
                answer(pending.caller, id: first.id, into: &actions)
                return
            }
            flows.hold(FlowRun(id: id, spec: pending.spec, loaded: true, maxResultBytes: configuration.maxFrameSize))
            answer(pending.caller, id: id.bytes, into: &actions)
            actions.append(
                .publish(.jobSubmitted, JobEvent(id: id, service: FlowSpec.service, attempt: 0, status: nil)))
            advanceFlow(id, into: &actions)
        }
    }

    // MARK: Progress

    /// Does what the flow's state calls for now: submits the steps whose input is ready (in
    /// one transaction), cancels the steps of a flow that stopped, and records its end.
    mutating func advanceFlow(_ id: JobID, into actions: inout [Action]) {
        // In place: a copy of a flow's state (its steps) per step would cost a large flow's size
        // at each of its steps.
        guard let decision = flows.runs[id]?.decide(), let jobs = flows.runs[id]?.jobs else { return }
        var records: [JobChange] = []
        var submitted: [JobID] = []
        // A bounded slice a decision: the rest at the broker's next ticks, so that a group of
        // thousands never holds its loop for long.
        if decision.submit.count > FlowBook.submitsPerDecision { flows.later.insert(id) }
        for (step, body) in decision.submit.prefix(FlowBook.submitsPerDecision) {
            var submission = jobs[step]
            submission.body = body
            submission.idempotencyKey = FlowSpec.stepKey(flow: id, step: step)
            let (job, record) = pend(submission, waiter: nil)
            flows.runs[id]?.submitting(step, job: job)
            records.append(.submitted(record))
            submitted.append(job)
        }
        if !records.isEmpty { actions.append(.journal(.write(records, .flowSteps(submitted)))) }
        for job in decision.cancel { cancel(job, caller: nil, into: &actions) }
        if let end = decision.end, let run = flows.runs[id] { writeFlowEnd(run, end, into: &actions) }
    }

    private func writeFlowEnd(_ run: FlowRun, _ end: FlowRun.End, into actions: inout [Action]) {
        let (sum, overflow) = configuration.wallClock().addingReportingOverflow(
            Int64(clamping: run.spec.retentionMilliseconds))
        let expiresAt = overflow ? Int64.max : sum
        let changes: [JobChange] =
            [
                .finished(
                    id: run.id.bytes, state: Self.journalState(end.state) ?? .failed,
                    outcome: [end.status.rawValue] + end.outcome, expiresAt: expiresAt,
                    endedAt: configuration.wallClock())
            ] + run.submittedJobs.map { .retained(id: $0.bytes, expiresAt: expiresAt) }
        actions.append(.journal(.write(changes, .flowEnded(run.id))))
    }

    /// The flow's outcome is on disk: whoever waits hears it, and the flow is forgotten.
    mutating func flowEndWritten(
        _ id: JobID, _ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]
    ) {
        guard let run = flows.runs[id], let end = run.ending else { return }
        if case .failure(let error) = result {
            flows.runs[id]?.ending = nil
            flows.retry.insert(id)
            actions.append(
                .log(
                    .warning, "journal: a flow's outcome was not recorded; trying again",
                    ["flow": "\(id)", "error": "\(error)"]))
            return
        }
        let report = JobReport(
            state: end.state, attempt: 1, outcomeStatus: end.status, service: FlowSpec.service, outcome: end.outcome)
        flows.release(id)
        let kind = flows.ended.count(end.state)
        actions.append(.publish(kind, JobEvent(id: id, service: FlowSpec.service, attempt: 0, status: end.status)))
        for waiter in book.takeWaiters(of: id) { answer(waiter, report, into: &actions) }
    }

    /// A step's job was written (or found: its key was taken by a submit before a restart).
    mutating func flowStepSubmitted(
        _ job: JobID, key: String?, _ result: Result<JournalReceipt, JournalError>, advancing: Bool,
        into actions: inout [Action]
    ) {
        guard let key, let (flow, step) = FlowSpec.step(ofKey: key), let steps = flows.runs[flow]?.steps.indices,
            steps.contains(step), flows.runs[flow]?.steps[step] == .submitting(job)
        else { return }
        switch result {
        case .failure(let error):
            flows.runs[flow]?.unsubmitted(step)
            flows.retry.insert(flow)
            actions.append(
                .log(
                    .warning, "journal: a flow's step was not recorded; trying again",
                    ["flow": "\(flow)", "step": "\(step)", "error": "\(error)"]))
        case .success(let receipt):
            if let first = receipt.duplicates[job.bytes], let firstID = JobID(bytes: first.id) {
                flows.runs[flow]?.unsubmitted(step)
                flows.runs[flow]?.load(first, step: step)
                if case .submitted = flows.runs[flow]?.steps[step], book.jobs[firstID] == nil {
                    // Held by nobody in memory: it ended meanwhile; read at the next maintenance.
                    flows.runs[flow]?.unsubmitted(step)
                    flows.retry.insert(flow)
                }
            } else {
                flows.runs[flow]?.submitted(step, job: job)
                // A step that runs changes nothing for the others, unless the flow stopped (it is
                // cancelled).
                if flows.runs[flow]?.halted != true { return }
            }
        }
        if advancing { advanceFlow(flow, into: &actions) }
    }

    /// A step's job ended (its outcome is on disk).
    mutating func flowStepEnded(_ job: JobID, key: String?, _ report: JobReport, into actions: inout [Action]) {
        guard let key, let (flow, step) = FlowSpec.step(ofKey: key), flows.runs[flow] != nil else { return }
        flows.runs[flow]?.ended(step, job: job, report)
        if flows.runs[flow]?.needsDecision(after: step) == true { advanceFlow(flow, into: &actions) }
    }

    /// Cancels a flow: its waiting steps never run, its running ones are cancelled; `caller`
    /// hears once its outcome is on disk.
    mutating func cancelFlow(_ id: JobID, caller: JobCaller?, into actions: inout [Action]) {
        flows.runs[id]?.cancelRequested = true
        if let caller { book.addWaiter(caller, for: id) }
        advanceFlow(id, into: &actions)
    }

    /// A status or a held wait about a flow the broker runs.
    mutating func answerAboutFlow(
        _ id: JobID, to caller: JobCaller, holding hold: Int64?, now: Int64, into actions: inout [Action]
    ) {
        guard let run = flows.runs[id] else { return }
        guard let hold, book.mayHold(caller) else {
            answer(caller, flowReport(run), into: &actions)
            return
        }
        guard book.addWaiter(caller, for: id) else {
            actions.append(.count(.duplicate))
            return
        }
        book.timers.insert(JobBook.TimerEntry(due: now + hold, id: id, kind: .hold(caller)))
    }

    /// A flow as a job: running once any step was submitted.
    func flowReport(_ run: FlowRun) -> JobReport {
        let started = run.steps.contains { $0 != .waiting }
        return JobReport(state: started ? .running : .queued, attempt: 1, service: FlowSpec.service)
    }

    /// A held step's job's report, for a flow's status.
    func liveReport(_ id: JobID) -> JobReport? {
        book.jobs[id].map(report)
    }

    // MARK: Restarts

    /// A flow's record found unfinished at a start: held, and its steps' records read before
    /// anything is decided (``flowLoaded(_:_:into:)``). Steps that end meanwhile are noted.
    mutating func recoverFlow(_ record: JobRecord, into actions: inout [Action]) -> Bool {
        guard let id = JobID(bytes: record.id), let spec = try? FlowSpec(decoding: record.body) else { return false }
        flows.hold(FlowRun(id: id, spec: spec, loaded: false, maxResultBytes: configuration.maxFrameSize))
        actions.append(.journal(.loadFlow(id, Self.stepKeys(id, spec))))
        return true
    }

    static func stepKeys(_ id: JobID, _ spec: FlowSpec) -> [String] {
        (0..<spec.steps.count).map { FlowSpec.stepKey(flow: id, step: $0) }
    }

    mutating func flowLoaded(_ id: JobID, _ result: Result<[JobRecord], JournalError>, into actions: inout [Action]) {
        guard var run = flows.runs[id], !run.loaded else { return }
        switch result {
        case .failure(let error):
            flows.retry.insert(id)
            actions.append(
                .log(
                    .warning, "journal: a flow's steps could not be read; trying again",
                    ["flow": "\(id)", "error": "\(error)"]))
        case .success(let records):
            for record in records {
                guard let key = record.idempotencyKey, let (flow, step) = FlowSpec.step(ofKey: key), flow == id
                else { continue }
                run.load(record, step: step)
            }
            run.loaded = true
            flows.runs[id] = run
            advanceFlow(id, into: &actions)
        }
    }

    /// What the journal holds of a flow the broker does not (it ended, or is unknown), built
    /// where the journal is read: a flow of thousands of steps takes a while to take in, which
    /// its thread spends, not the broker's loop.
    static func readFlow(_ id: JobID, record: JobRecord?, steps: [JobRecord]) -> FlowRead {
        guard let record else {
            // Never submitted to this broker, or its retention passed.
            return .status(FlowStatus(state: .unknown, onFailure: .stop, root: .chain([])).encode(), ended: false)
        }
        guard record.service == FlowSpec.service else { return .notAFlow(service: record.service) }
        guard let spec = try? FlowSpec(decoding: record.body) else { return .unreadable }
        var run = FlowRun(id: id, spec: spec, loaded: true)
        for step in steps {
            guard let key = step.idempotencyKey, let (flow, index) = FlowSpec.step(ofKey: key), flow == id
            else { continue }
            run.load(step, step: index)
        }
        let state = report(record).state
        return .status(run.status(state: state, live: { _ in nil }).encode(), ended: state.isFinished)
    }

    /// The journal's answer about a flow the broker does not hold.
    mutating func flowRead(
        _ id: JobID, _ caller: JobCaller, _ result: Result<FlowRead, JournalError>, into actions: inout [Action]
    ) {
        switch result {
        case .failure(let error):
            answer(caller, .journalUnavailable, error.description, into: &actions)
        case .success(.status(let bytes, let ended)):
            // An ended flow's status does not change: asked again (a page that polls it), it is
            // answered from memory.
            if ended { flows.remember(id, status: bytes) }
            answer(caller, id: bytes, into: &actions)
        case .success(.notAFlow(let service)):
            answer(
                caller, .invalidPayload,
                "\(id) is a job of \(service), not a flow: ask its status as a job's (sky.status(of:), skyctl jobs show)",
                into: &actions)
        case .success(.unreadable):
            answer(caller, .internalError, "flow \(id)'s record is unreadable", into: &actions)
        }
    }

    /// Goes on with flows whose ready steps were more than one decision submits, a slice each
    /// while `budget` lasts.
    mutating func advanceLaterFlows(budget: inout WorkBudget, into actions: inout [Action]) {
        while budget.hasRoom, let id = flows.later.popFirst() {
            budget.spend()
            advanceFlow(id, into: &actions)
        }
    }

    /// Tries again what failed for flows: a step's submit, an outcome's write, a read at a start.
    mutating func retryFlows(into actions: inout [Action]) {
        let ids = flows.retry
        flows.retry.removeAll()
        for id in ids {
            guard let run = flows.runs[id] else { continue }
            if !run.loaded {
                actions.append(.journal(.loadFlow(id, Self.stepKeys(id, run.spec))))
            } else {
                advanceFlow(id, into: &actions)
            }
        }
    }
}
