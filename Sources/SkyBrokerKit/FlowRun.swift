import SkyJSON
import SkyJournal
import SkyProtocol

/// One flow the broker runs: its shape (``FlowSpec``), where each step stands, and what
/// happens next (``decide()``), worked out afresh from the steps' states each time one
/// changes. Nothing else is kept: a broker that starts again rebuilds a flow from its record
/// and its steps' records (each step's job carries the flow's key for it), so that what it
/// decides then is what it would have decided before it stopped, and a step that ended is
/// never submitted again.
struct FlowRun: Sendable {
    /// Where one step stands.
    enum Step: Sendable, Equatable {
        /// Not submitted: its input is not ready, or it will not run.
        case waiting
        /// Its job's write is in flight.
        case submitting(JobID)
        /// Its job is held by the scheduler (queued, scheduled or running).
        case submitted(JobID)
        /// Its job ended: its state, attempts, status and outcome (the result, or the error body).
        case ended(JobID, JobReport)
    }

    /// What the broker does for the flow now.
    struct Decision: Sendable, Equatable {
        /// Steps to submit, with their tasks.
        var submit: [(step: Int, body: [UInt8])] = []
        /// Steps' jobs to cancel (the flow stopped).
        var cancel: [JobID] = []
        /// How the flow ended, once nothing of it runs.
        var end: End?

        static func == (lhs: Decision, rhs: Decision) -> Bool {
            lhs.submit.map(\.step) == rhs.submit.map(\.step) && lhs.submit.map(\.body) == rhs.submit.map(\.body)
                && lhs.cancel == rhs.cancel && lhs.end == rhs.end
        }
    }

    struct End: Sendable, Equatable {
        var state: JobState
        var status: ReplyStatus
        var outcome: [UInt8]
    }

    let id: JobID
    let spec: FlowSpec
    /// The steps' jobs, in their order (the task body of a step that comes first).
    let jobs: [JobSubmission]
    /// Whether a step is inside a batch, whose failures stop nothing.
    let inBatch: [Bool]
    var steps: [Step]
    /// The flow's steps' records were read (a flow taken up at a start is not decided on
    /// before: its steps' states would be guesses).
    var loaded: Bool
    var cancelRequested = false
    /// The flow's outcome, being written.
    var ending: End?
    /// Steps whose cancel the flow asked for (it stopped): their ends are not failures.
    private var cancelsSent: Set<Int> = []
    /// The step whose failure came first: what the flow's failure names (a step ended later,
    /// or one the flow cancelled because of it, may have a lower number).
    private(set) var firstFailure: Int?

    init(id: JobID, spec: FlowSpec, loaded: Bool) {
        self.id = id
        self.spec = spec
        jobs = spec.steps
        var inBatch: [Bool] = []
        func walk(_ node: FlowSpec.Node, _ batch: Bool) {
            switch node {
            case .step: inBatch.append(batch)
            case .chain(let parts), .group(let parts): for part in parts { walk(part, batch) }
            case .batch(let parts): for part in parts { walk(part, true) }
            }
        }
        walk(spec.root, false)
        self.inBatch = inBatch
        steps = Array(repeating: .waiting, count: inBatch.count)
        self.loaded = loaded
    }

    /// The result bytes the flow holds (its ended steps' outcomes).
    var heldBytes: Int {
        steps.reduce(0) { total, step in
            if case .ended(_, let report) = step { return total + report.outcome.count }
            return total
        }
    }

    /// The steps' jobs that were submitted.
    var submittedJobs: [JobID] {
        steps.compactMap { step in
            switch step {
            case .waiting: nil
            case .submitting(let id), .submitted(let id), .ended(let id, _): id
            }
        }
    }

    /// Whether the flow stops: cancelled, or a step outside any batch failed and the flow's
    /// policy is to stop.
    var halted: Bool {
        if cancelRequested { return true }
        guard spec.onFailure == .stop else { return false }
        return steps.indices.contains { index in
            guard !inBatch[index], case .ended(_, let report) = steps[index] else { return false }
            return report.state != .succeeded
        }
    }

    // MARK: Deciding

    private enum Input {
        /// A step that comes first: its own body.
        case own
        case bytes([UInt8])
        /// What comes before has not ended.
        case notYet
        /// What comes before failed, or the flow stopped: it never runs.
        case blocked
    }

    private enum Outcome {
        case pending
        case succeeded([UInt8])
        /// The first step that failed, and why the part failed if not for that step's reason.
        case failed(step: Int, reason: String?)
        case blocked
    }

    /// What to do now: the steps whose input is ready, the cancels a stopped flow needs, and
    /// the flow's end once nothing of it runs. The caller marks the steps it submits
    /// (``Step/submitting(_:)``) before it asks again.
    mutating func decide() -> Decision {
        guard loaded, ending == nil else { return Decision() }
        var decision = Decision()
        let halted = halted
        var index = 0
        let root = evaluate(spec.root, input: .own, halted: halted, index: &index, into: &decision)
        let running = steps.contains { step in
            switch step {
            case .submitting, .submitted: true
            default: false
            }
        }
        guard !running, decision.submit.isEmpty else { return decision }
        switch root {
        case .pending:
            return decision
        case .succeeded(let bytes) where !cancelRequested:
            decision.end = End(state: .succeeded, status: .ok, outcome: bytes)
        case .failed(let step, let reason) where !cancelRequested:
            decision.end = failure(reason == nil ? firstFailure ?? step : step, reason)
        default:
            decision.end = End(
                state: .cancelled, status: .cancelled,
                outcome: RemoteErrorBody(type: ReplyStatus.cancelled.description, message: "flow cancelled by request")
                    .encoded())
        }
        ending = decision.end
        return decision
    }

    private mutating func evaluate(
        _ node: FlowSpec.Node, input: Input, halted: Bool, index: inout Int, into decision: inout Decision
    ) -> Outcome {
        switch node {
        case .step:
            let step = index
            index += 1
            switch steps[step] {
            case .ended(_, let report) where report.state == .succeeded:
                return .succeeded(report.outcome)
            case .ended:
                return .failed(step: step, reason: nil)
            case .submitted(let job):
                if halted, cancelsSent.insert(step).inserted { decision.cancel.append(job) }
                return .pending
            case .submitting:
                return .pending
            case .waiting:
                switch input {
                case .notYet: return .pending
                case .blocked: return .blocked
                case .own, .bytes:
                    if halted { return .blocked }
                    if case .bytes(let bytes) = input {
                        decision.submit.append((step, bytes))
                    } else {
                        decision.submit.append((step, jobs[step].body))
                    }
                    return .pending
                }
            }
        case .chain(let parts):
            // The first part that did not succeed says how the chain stands; else its last.
            var input = input
            var result = Outcome.blocked
            var settled = false
            for part in parts {
                let outcome = evaluate(part, input: input, halted: halted, index: &index, into: &decision)
                switch outcome {
                case .succeeded(let bytes): input = .bytes(bytes)
                case .pending: input = .notYet
                case .failed, .blocked: input = .blocked
                }
                if !settled {
                    result = outcome
                    if case .succeeded = outcome {} else { settled = true }
                }
            }
            return result
        case .group(let parts), .batch(let parts):
            let isBatch = if case .batch = node { true } else { false }
            var outcomes: [Outcome] = []
            var lastSteps: [Int] = []
            for part in parts {
                outcomes.append(evaluate(part, input: input, halted: halted, index: &index, into: &decision))
                lastSteps.append(index - 1)
            }
            if outcomes.contains(where: { if case .pending = $0 { true } else { false } }) { return .pending }
            if isBatch {
                var counts = (succeeded: 0, failed: 0, cancelled: 0)
                for outcome in outcomes {
                    switch outcome {
                    case .succeeded: counts.succeeded += 1
                    case .failed(let step, _):
                        if case .ended(_, let report) = steps[step], report.state == .cancelled {
                            counts.cancelled += 1
                        } else {
                            counts.failed += 1
                        }
                    default: counts.cancelled += 1
                    }
                }
                return .succeeded(
                    Array(
                        "{\"cancelled\":\(counts.cancelled),\"failed\":\(counts.failed),\"succeeded\":\(counts.succeeded)}"
                            .utf8))
            }
            var array: [UInt8] = [UInt8(ascii: "[")]
            for (outcome, lastStep) in zip(outcomes, lastSteps) {
                switch outcome {
                case .succeeded(let bytes):
                    guard CanonicalJSON.isValid(bytes) else {
                        return .failed(
                            step: lastStep,
                            reason:
                                "its result is not JSON (\(bytes.count) bytes), and a group's result is the JSON array of its parts' results; encode the results of a group's parts as JSON"
                        )
                    }
                    if array.count > 1 { array.append(UInt8(ascii: ",")) }
                    array += bytes
                default:
                    return outcome
                }
            }
            array.append(UInt8(ascii: "]"))
            return .succeeded(array)
        }
    }

    /// The flow's failure: the first failed step's status, and its message naming the step.
    private func failure(_ step: Int, _ reason: String?) -> End {
        let service = jobs[step].service
        var status = ReplyStatus.handlerError
        var original = RemoteErrorBody(type: "FlowResultNotJSON", message: reason ?? "")
        var job = ""
        if case .ended(let id, let report) = steps[step] {
            job = ", job \(id)"
            if reason == nil {
                status = report.state == .cancelled ? .cancelled : report.outcomeStatus
                original = RemoteErrorBody(decoding: report.outcome)
            }
        }
        let others = steps.indices.count { index in
            guard index != step, case .ended(_, let report) = steps[index] else { return false }
            return report.state == .failed
        }
        var message = "flow \(id): step \(step) (\(service)\(job)) failed: \(original.message)"
        if others > 0 { message += " (and \(others) more step\(others == 1 ? "" : "s") failed)" }
        return End(
            state: .failed, status: status,
            outcome: RemoteErrorBody(type: original.type, message: message).encoded())
    }

    /// A step's job ended (its outcome is on disk).
    mutating func ended(_ step: Int, job: JobID, _ report: JobReport) {
        guard steps.indices.contains(step) else { return }
        steps[step] = .ended(job, report)
        if report.state != .succeeded, firstFailure == nil, !cancelsSent.contains(step) { firstFailure = step }
    }

    // MARK: Reports

    /// The flow's status now; `live` gives a submitted step's job's report.
    func status(state: JobState, live: (JobID) -> JobReport?) -> FlowStatus {
        let halted = halted || state.isFinished
        var index = 0
        func convert(_ node: FlowSpec.Node) -> FlowStatus.Node {
            switch node {
            case .step(let job):
                defer { index += 1 }
                var step = FlowStatus.Step(index: index, service: job.service, state: .waiting)
                switch steps[index] {
                case .waiting:
                    if halted { step.state = .cancelled }
                case .submitting(let id):
                    step.state = .queued
                    step.job = id
                case .submitted(let id):
                    step.job = id
                    step.state = .queued
                    if let report = live(id) {
                        step.state = FlowStatus.StepState(report.state)
                        step.attempt = report.attempt
                    }
                case .ended(let id, let report):
                    step.job = id
                    step.state = FlowStatus.StepState(report.state)
                    step.attempt = report.attempt
                }
                return .step(step)
            case .chain(let parts): return .chain(parts.map(convert))
            case .group(let parts): return .group(parts.map(convert))
            case .batch(let parts): return .batch(parts.map(convert))
            }
        }
        return FlowStatus(state: state, onFailure: spec.onFailure, root: convert(spec.root))
    }

    /// Takes in a step's record read from the journal (at a start, or for a status): a step
    /// known in memory keeps what it knows.
    mutating func load(_ record: JobRecord, step: Int) {
        guard steps.indices.contains(step), case .waiting = steps[step], let id = JobID(bytes: record.id) else {
            return
        }
        if record.state.isFinished {
            // Which of the failures read back came first is not recorded: the first read names it.
            ended(step, job: id, JobScheduler.report(record))
        } else {
            steps[step] = .submitted(id)
        }
    }
}
