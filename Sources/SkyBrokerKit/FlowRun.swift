import SkyJSON
import SkyJournal
import SkyProtocol

/// One flow the broker runs: its shape (``FlowSpec``), where each step stands, and what
/// happens next (``decide()``), worked out from the steps' states. Nothing is kept that those
/// states do not give back (the counts and the chains' settled parts that make deciding cheap
/// are rebuilt with them): a broker that starts again rebuilds a flow from its record and its
/// steps' records (each step's job carries the flow's key for it), so that what it decides then
/// is what it would have decided before it stopped, and a step that ended is never submitted
/// again.
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
    /// Where each step stands; changed through the methods below, which keep the counts that
    /// let a step's end skip deciding when it cannot change anything (``needsDecision(after:)``).
    private(set) var steps: [Step]
    /// Steps submitted (or being submitted) that have not ended.
    private(set) var live = 0
    /// For a step that is a part of a group or batch whose parts are all steps (a flat group):
    /// that group's number; its parts not yet ended are counted in ``unsettled``.
    private let flatGroup: [Int?]
    private var unsettled: [Int] = []
    /// Times the flow was decided on, and the nodes those decisions looked at: what a flow
    /// costs the broker.
    private(set) var decisions = 0
    private(set) var visits = 0
    /// A step outside any batch ended other than succeeded.
    private var failedOutsideBatch = false
    /// Per node of the tree (numbered in the order it is written): the steps and nodes of its
    /// subtree, so that a decision can step over parts that cannot act.
    private let subtree: [(steps: Int, nodes: Int)]
    /// Per chain (by node number): how many of its first parts succeeded, their steps and
    /// nodes, and the last one's result, the next part's input. A part that succeeded never
    /// changes, so a decision starts a chain where this leaves off.
    private var settledParts: [Int: (parts: Int, steps: Int, nodes: Int, result: [UInt8])] = [:]
    /// The flow stopped, and the cancels that needs were asked for.
    private var haltHandled = false
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

    /// The largest result a group may assemble (the broker's frame limit).
    let maxResultBytes: Int

    init(id: JobID, spec: FlowSpec, loaded: Bool, maxResultBytes: Int = 16 << 20) {
        self.maxResultBytes = maxResultBytes
        self.id = id
        self.spec = spec
        jobs = spec.steps
        var inBatch: [Bool] = []
        var flatGroup: [Int?] = []
        var unsettled: [Int] = []
        func walk(_ node: FlowSpec.Node, _ batch: Bool) {
            switch node {
            case .step:
                inBatch.append(batch)
                flatGroup.append(nil)
            case .chain(let parts): for part in parts { walk(part, batch) }
            case .group(let parts), .batch(let parts):
                let isBatch = if case .batch = node { true } else { batch }
                let flat = parts.allSatisfy { if case .step = $0 { true } else { false } }
                for part in parts {
                    walk(part, isBatch)
                    if flat { flatGroup[flatGroup.count - 1] = unsettled.count }
                }
                if flat { unsettled.append(parts.count) }
            }
        }
        walk(spec.root, false)
        var subtree: [(steps: Int, nodes: Int)] = []
        func size(_ node: FlowSpec.Node) -> (steps: Int, nodes: Int) {
            let me = subtree.count
            subtree.append((0, 0))
            var total = (steps: 0, nodes: 1)
            switch node {
            case .step: total.steps = 1
            case .chain(let parts), .group(let parts), .batch(let parts):
                for part in parts {
                    let inner = size(part)
                    total.steps += inner.steps
                    total.nodes += inner.nodes
                }
            }
            subtree[me] = total
            return total
        }
        _ = size(spec.root)
        self.subtree = subtree
        self.inBatch = inBatch
        self.flatGroup = flatGroup
        self.unsettled = unsettled
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
        cancelRequested || (spec.onFailure == .stop && failedOutsideBatch)
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
    /// (``submitting(_:job:)``) before it asks again.
    mutating func decide() -> Decision {
        guard loaded, ending == nil else { return Decision() }
        decisions += 1
        var decision = Decision()
        let halted = halted
        if halted { haltHandled = true }
        var index = 0
        var node = 0
        let root = evaluate(spec.root, input: .own, halted: halted, index: &index, node: &node, into: &decision)
        guard live == 0, decision.submit.isEmpty else { return decision }
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
        _ node: FlowSpec.Node, input: Input, halted: Bool, index: inout Int, node number: inout Int,
        into decision: inout Decision
    ) -> Outcome {
        let me = number
        number += 1
        visits += 1
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
            // The first part that did not succeed says how the chain stands; else its last. The
            // parts after it cannot act (they wait for it, or never run), so they are stepped
            // over, as are the first parts that succeeded before (``settledParts``).
            let end = (step: index + subtree[me].steps, node: me + subtree[me].nodes)
            var input = input
            var start = 0
            var result = Outcome.blocked
            if let settled = settledParts[me] {
                start = settled.parts
                index += settled.steps
                number += settled.nodes
                input = .bytes(settled.result)
                result = .succeeded(settled.result)
            }
            for offset in start..<parts.count {
                let before = (step: index, node: number)
                let outcome = evaluate(
                    parts[offset], input: input, halted: halted, index: &index, node: &number, into: &decision)
                guard case .succeeded(let bytes) = outcome else {
                    index = end.step
                    number = end.node
                    return outcome
                }
                let settled = settledParts[me]
                settledParts[me] = (
                    offset + 1, (settled?.steps ?? 0) + index - before.step,
                    (settled?.nodes ?? 0) + number - before.node,
                    bytes
                )
                input = .bytes(bytes)
                result = outcome
            }
            return result
        case .group(let parts), .batch(let parts):
            let isBatch = if case .batch = node { true } else { false }
            var outcomes: [Outcome] = []
            var lastSteps: [Int] = []
            for part in parts {
                outcomes.append(
                    evaluate(part, input: input, halted: halted, index: &index, node: &number, into: &decision))
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
                    // With its comma, and the closing bracket still to come.
                    guard array.count + (array.count > 1 ? 1 : 0) + bytes.count + 1 <= maxResultBytes else {
                        return .failed(
                            step: lastStep,
                            reason:
                                "the group's result (its parts' results together) is over \(maxResultBytes) bytes, the broker's --max-frame-size, so no step or client could be sent it; make the parts' results smaller, or the group"
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

    // MARK: Steps' changes

    /// A step's job is being written.
    mutating func submitting(_ step: Int, job: JobID) {
        guard case .waiting = steps[step] else { return }
        steps[step] = .submitting(job)
        live += 1
    }

    /// A step's job is on disk: held by the scheduler.
    mutating func submitted(_ step: Int, job: JobID) {
        guard case .submitting = steps[step] else { return }
        steps[step] = .submitted(job)
    }

    /// A step's job was not written (or is another's): the step waits again.
    mutating func unsubmitted(_ step: Int) {
        switch steps[step] {
        case .submitting, .submitted: live -= 1
        default: break
        }
        steps[step] = .waiting
    }

    /// A step's job ended (its outcome is on disk).
    mutating func ended(_ step: Int, job: JobID, _ report: JobReport) {
        guard steps.indices.contains(step) else { return }
        switch steps[step] {
        case .ended: return
        case .submitting, .submitted: live -= 1
        case .waiting: break
        }
        steps[step] = .ended(job, report)
        if let group = flatGroup[step] { unsettled[group] -= 1 }
        if report.state != .succeeded {
            if !inBatch[step] { failedOutsideBatch = true }
            if firstFailure == nil, !cancelsSent.contains(step) { firstFailure = step }
        }
    }

    /// Whether the end of `step` can change what the flow does: not while a stopped flow waits
    /// for the cancels it asked for, nor when a part of a flat group ended and others have not
    /// (the group's outcome waits for them, and the flow's policy did not stop it). Deciding
    /// costs the flow's size; skipping these keeps a group's or a stop's cost linear in its
    /// steps instead of quadratic.
    func needsDecision(after step: Int) -> Bool {
        if halted { return !(haltHandled && live > 0) }
        if let group = flatGroup[step], unsettled[group] > 0 { return false }
        return true
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
            live += 1
        }
    }
}
