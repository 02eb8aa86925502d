import Foundation
import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Flows: chains, groups, chords and batches, across restarts")
struct FlowTests {
    typealias S = FlowServices

    /// Submits `spec` and runs the broker until it is on disk; returns the flow's id.
    static func submit(_ spec: FlowSpec, _ sim: inout FlowSimulation, request: UInt64 = 1) throws -> JobID {
        let id = RequestID(high: 9, low: request)
        sim.request(BrokerService.flowSubmit, spec.encode(), id)
        while sim.answer(id) == nil, try sim.step() {}
        let reply = try #require(sim.answer(id))
        #expect(reply.status == .ok, "\(String(decoding: reply.body, as: UTF8.self))")
        return try #require(JobID(bytes: reply.body))
    }

    /// The flow's outcome on disk: its state and result (or error body).
    static func outcome(_ id: JobID, _ sim: FlowSimulation) throws -> (JobRecord.State, String) {
        let record = try #require(try sim.record(id))
        return (record.state, String(decoding: (record.outcome ?? []).dropFirst(), as: UTF8.self))
    }

    static let chain = FlowSpec(.chain([S.step("double", "5"), S.step("inc"), S.step("double")]))
    static let group = FlowSpec(.group((1...100).map { S.step("double", "\($0)") }))
    static let chord = FlowSpec(.chain([.group((1...50).map { S.step("inc", "\($0)") }), S.step("sum")]))

    @Test func aChainFeedsEachResultToTheNextStep() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.chain, &sim)
        try sim.run()
        #expect(try Self.outcome(id, sim) == (.succeeded, "22"))  // (5 × 2 + 1) × 2
        #expect(sim.executions.count == 3 && sim.executions.values.allSatisfy { $0 == 1 })
        // Operators see the flow as a job of mmi.flow: submitted, then its end, and counted.
        let flowEvents = sim.events.filter { $0.event.id == id }
        #expect(flowEvents.map(\.kind) == [.jobSubmitted, .jobSucceeded])
        #expect(flowEvents.allSatisfy { $0.event.service == FlowSpec.service })
        #expect(sim.scheduler.counts()?.flows == FlowCounts(held: 0, steps: 0, succeeded: 1, failed: 0, cancelled: 0))
    }

    @Test func aGroupsResultIsItsPartsResultsInOrder() throws {
        var sim = try FlowSimulation(capacity: 7, handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.group, &sim)
        try sim.run()
        let expected = "[" + (1...100).map { "\($0 * 2)" }.joined(separator: ",") + "]"
        #expect(try Self.outcome(id, sim) == (.succeeded, expected))
    }

    @Test func aChordsCallbackGetsEveryResult() throws {
        var sim = try FlowSimulation(capacity: 3, handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.chord, &sim)
        try sim.run()
        #expect(try Self.outcome(id, sim) == (.succeeded, "\((2...51).reduce(0, +))"))
    }

    /// A step may carry a concurrency key (its submission's version 4), and the flow runs; a
    /// step with a key hold is refused, naming the step.
    @Test func aStepWithAConcurrencyKeyRunsAndOneWithAKeyHoldIsRefused() throws {
        var keyed = JobSubmission(service: "double", body: Array("5".utf8))
        keyed.concurrencyKey = "customer-42"
        keyed.concurrencyLimit = 1
        let spec = FlowSpec(.chain([.step(keyed), S.step("inc")]))
        #expect(try FlowSpec(decoding: spec.encode()) == spec)
        var sim = try FlowSimulation(capacity: 3, handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(spec, &sim)
        while try sim.step() {}
        #expect(try Self.outcome(id, sim) == (.succeeded, "11"))
        // The flow's record has its end time, and its details no job options of their own.
        let record = try #require(try sim.store.job(id.bytes))
        #expect(record.endedAt > 0)
        let details = JobScheduler.details(of: record, id)
        #expect(details.endedAt == record.endedAt && details.maxAttempts == nil && details.state == "succeeded")
        var held = keyed
        held.idempotencyKey = "k"
        held.keyHold = .whileQueued
        #expect(throws: ProtocolError.self) { try FlowSpec(decoding: FlowSpec(.step(held)).encode()) }
    }

    /// The broker killed after each of its steps in turn, for each flow: the flow ends with
    /// the same result, and no step that ended ran again (only one running at a kill did).
    @Test(arguments: [("chain", chain), ("group", group), ("chord", chord)])
    func aKillAtAnyPointRunsNoEndedStepAgain(name: String, spec: FlowSpec) throws {
        var clean = try FlowSimulation(capacity: 3, handlers: S.handlers)
        defer { clean.remove() }
        let cleanID = try Self.submit(spec, &clean)
        var total = 0
        while try clean.step() { total += 1 }
        let expected = try Self.outcome(cleanID, clean)
        // Every point for the chain; some 25 spread over the larger flows' (each run commits
        // hundreds of SQLite transactions).
        for killAt in stride(from: 1, through: total, by: name == "chain" ? 1 : max(1, total / 25)) {
            var sim = try FlowSimulation(capacity: 3, handlers: S.handlers)
            defer { sim.remove() }
            let id = try Self.submit(spec, &sim)
            try sim.run(limit: killAt)
            // Ended steps, by key, before the kill: none may run again.
            let ended = Set(
                try sim.store.jobs(idempotencyKeys: JobScheduler.stepKeys(id, spec)).filter(\.state.isFinished)
                    .compactMap(\.idempotencyKey))
            let before = sim.executions
            sim.kill()
            try sim.run()
            #expect(try Self.outcome(id, sim) == expected, "killed after \(killAt) steps")
            for key in ended {
                #expect(sim.executions[key] == before[key], "\(key) ran again after a kill at \(killAt)")
            }
            #expect(sim.executions.count == spec.steps.count, "killed after \(killAt)")
        }
    }

    /// Killed twice in one run, and the flow's outcome write lost each time it was asked.
    @Test func aFlowWhoseEndWasNotWrittenEndsAfterTheRestart() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.chain, &sim)
        // Run until the flow's end is asked for, then kill before it is written.
        while try sim.step() {
            let asked = sim.queue.contains { action in
                if case .journal(.write(_, .flowEnded)) = action { true } else { false }
            }
            if asked { break }
        }
        #expect(try sim.record(id)?.state == .running)
        sim.kill()
        try sim.run()
        #expect(try Self.outcome(id, sim) == (.succeeded, "22"))
        #expect(sim.executions.values.allSatisfy { $0 == 1 })
        // Its steps are kept as long as it: their expiry is the flow's.
        let flowExpiry = try #require(try sim.record(id)).expiresAt
        let steps = try sim.store.jobs(idempotencyKeys: JobScheduler.stepKeys(id, Self.chain))
        #expect(steps.count == 3 && steps.allSatisfy { $0.expiresAt == flowExpiry } && flowExpiry < .max)
    }

    @Test func aFailureStopsTheFlowAndCancelsWhatWouldRunAfter() throws {
        var sim = try FlowSimulation(capacity: 1, handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(
            .chain([.group([S.step("fail", "1"), S.step("double", "2"), S.step("double", "3")]), S.step("sum")]))
        let id = try Self.submit(spec, &sim)
        try sim.run()
        let (state, body) = try Self.outcome(id, sim)
        #expect(state == .failed)
        #expect(body.contains("step 0 (fail") && body.contains("it broke"), "\(body)")
        #expect(sim.scheduler.counts()?.flows?.failed == 1)
        #expect(sim.events.last { $0.event.id == id }?.kind == .jobFailed)
        // One worker credit: the failure came first; the two parts queued behind it were
        // cancelled and never ran, nor did the callback.
        #expect(sim.executions.count == 1)
        let status = try Self.status(id, &sim)
        #expect(status.steps.map(\.state) == [.failed, .cancelled, .cancelled, .cancelled])
    }

    /// The step that failed first is the one the flow's failure names, with its status: not a
    /// step of a lower number that the flow cancelled because of it, nor one that failed later.
    @Test(arguments: FlowSpec.FailurePolicy.allCases)
    func theFlowsFailureNamesTheStepThatFailedFirst(policy: FlowSpec.FailurePolicy) throws {
        var sim = try FlowSimulation(capacity: 3, handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(
            .group([S.step("double", "1"), S.step("inc", "2"), S.step("fail", "3")]), onFailure: policy)
        let id = try Self.submit(spec, &sim)
        try sim.end("fail")
        try sim.run()
        let record = try #require(try sim.record(id))
        let body = String(decoding: (record.outcome ?? []).dropFirst(), as: UTF8.self)
        #expect(record.state == .failed)
        #expect(body.contains("step 2 (fail") && body.contains("it broke") && !body.contains("more step"), "\(body)")
        #expect(record.outcome?.first == ReplyStatus.handlerError.rawValue, "the failed step's status")
        let states = try Self.status(id, &sim).steps.map(\.state)
        #expect(states == (policy == .stop ? [.cancelled, .cancelled, .failed] : [.succeeded, .succeeded, .failed]))
    }

    @Test func goingOnRunsWhatDoesNotNeedTheFailedStep() throws {
        var sim = try FlowSimulation(capacity: 1, handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(
            .group([.chain([S.step("fail", "1"), S.step("inc")]), .chain([S.step("double", "2"), S.step("inc")])]),
            onFailure: .goOn)
        let id = try Self.submit(spec, &sim)
        try sim.run()
        let (state, body) = try Self.outcome(id, sim)
        #expect(state == .failed && body.contains("step 0 (fail"), "\(body)")
        let status = try Self.status(id, &sim)
        #expect(status.steps.map(\.state) == [.failed, .cancelled, .succeeded, .succeeded])
    }

    @Test func aBatchEndsWithItsCountsWhateverItsPartsDid() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(
            .chain([.batch([S.step("fail"), S.step("double", "1"), S.step("double", "2")]), S.step("double")]))
        // The completion step gets the counts; "double" of an object is -2 (the handler's
        // reading of what is not a number): the counts reached it.
        let id = try Self.submit(FlowSpec(spec.root), &sim)
        try sim.run()
        #expect(try Self.outcome(id, sim) == (.succeeded, "-2"))
        let batch = FlowSpec(.batch([S.step("fail"), S.step("double", "1"), S.step("double", "2")]))
        let second = try Self.submit(batch, &sim, request: 2)
        try sim.run()
        #expect(try Self.outcome(second, sim) == (.succeeded, #"{"cancelled":0,"failed":1,"succeeded":2}"#))
    }

    @Test func cancellingAFlowCancelsItsRunningAndWaitingSteps() throws {
        var sim = try FlowSimulation(capacity: 1, handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.chain, &sim)
        // Its first step is running (a credit took it); nothing ended.
        while sim.running.isEmpty, try sim.step() {}
        let cancel = RequestID(high: 9, low: 50)
        sim.request(BrokerService.jobCancel, id.bytes, cancel)
        try sim.run()
        #expect(try Self.outcome(id, sim).0 == .cancelled)
        let report = try JobReport(decoding: try #require(sim.answer(cancel)).body)
        #expect(report.state == .cancelled)
        #expect(sim.executions.isEmpty, "the running step was cancelled before it ended")
        #expect(try Self.status(id, &sim).steps.map(\.state) == [.cancelled, .cancelled, .cancelled])
    }

    @Test func aGroupOfResultsThatAreNotJSONFailsNamingThePart() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(FlowSpec(.group([S.step("double", "1"), S.step("binary", "x")])), &sim)
        try sim.run()
        let (state, body) = try Self.outcome(id, sim)
        #expect(state == .failed && body.contains("step 1 (binary") && body.contains("not JSON"), "\(body)")
    }

    @Test func aWaitIsAnsweredWithTheFlowsResultAndARepeatedKeyWithTheSameFlow() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        var spec = Self.chain
        spec.idempotencyKey = "nightly-2026-11-29"
        let id = try Self.submit(spec, &sim)
        let wait = RequestID(high: 9, low: 60)
        sim.request(BrokerService.jobWait, id.bytes, wait)
        #expect(try Self.submit(spec, &sim, request: 2) == id, "held: answered from memory")
        try sim.run()
        let report = try JobReport(decoding: try #require(sim.answer(wait)).body)
        #expect(report.state == .succeeded && report.outcome == Array("22".utf8))
        #expect(try Self.submit(spec, &sim, request: 3) == id, "ended: the journal's key")
    }

    @Test func badFlowsAreRefusedNamingTheProblemAndNothingIsRecorded() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let huge = FlowSpec(.group((0...FlowSpec.maxSteps).map { _ in S.step("double", "1") }))
        let cases: [(FlowSpec, String)] = [
            (huge, "more than 10000 steps"),
            (FlowSpec(.chain([])), "at least one part"),
            (FlowSpec(.chain([S.step("double", "1"), S.step("inc", "2")])), "its body must be empty"),
            (FlowSpec(.step(JobSubmission(service: "mmi.flow", body: []))), "broker's own"),
        ]
        for (number, (spec, expected)) in cases.enumerated() {
            #expect(spec.problem?.contains(expected) == true, "\(spec.problem ?? "nil")")
            let request = RequestID(high: 8, low: UInt64(number))
            sim.request(BrokerService.flowSubmit, spec.encode(), request)
            try sim.run()
            let reply = try #require(sim.answer(request))
            #expect(reply.status == .invalidPayload)
            #expect(String(decoding: reply.body, as: UTF8.self).contains(expected))
        }
        for garbage in [[], [1], [1, 0], [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], Array(repeating: 0xFF, count: 64)]
            as [[UInt8]]
        {
            let request = RequestID(high: 7, low: UInt64(garbage.count))
            sim.request(BrokerService.flowSubmit, garbage, request)
            try sim.run()
            #expect(sim.answer(request)?.status == .invalidPayload)
        }
        // A step's own submission refused names the step.
        var noAttempts = JobSubmission(service: "double", body: Array("1".utf8))
        noAttempts.maxAttempts = 0
        let request = RequestID(high: 8, low: 99)
        sim.request(
            BrokerService.flowSubmit, FlowSpec(.chain([S.step("inc", "1"), .step(noAttempts)])).encode(), request)
        try sim.run()
        let refusal = String(decoding: try #require(sim.answer(request)).body, as: UTF8.self)
        #expect(refusal.contains("step 1: its job submission:") && refusal.contains("attempts"), "\(refusal)")
        #expect(try sim.store.jobCount() == 0)
    }

    @Test func theStatusOfAnEndedFlowIsReadFromTheJournal() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let id = try Self.submit(Self.chord, &sim)
        try sim.run()
        #expect(sim.scheduler.flows.runs.isEmpty)
        let status = try Self.status(id, &sim)
        #expect(status.state == .succeeded && status.steps.count == 51)
        #expect(status.steps.allSatisfy { $0.state == .succeeded && $0.job != nil })
        guard case .chain(let parts) = status.root, case .group(let members) = parts.first else {
            Issue.record("the tree's shape: \(status.root)")
            return
        }
        #expect(members.count == 50)
        // Asked again, it is answered from memory: an ended flow's status does not change.
        let again = RequestID(high: 6, low: 1)
        sim.request(BrokerService.flowStatus, id.bytes, again)
        #expect(!sim.queue.contains { if case .journal(.readFlow) = $0 { true } else { false } })
        try sim.run()
        #expect(try FlowStatus(decoding: try #require(sim.answer(again)).body) == status)
        let unknown = try Self.status(JobID(bytes: [UInt8](repeating: 3, count: 16))!, &sim)
        #expect(unknown.state == .unknown)
    }

    /// A group of 2,500: submitted a thousand at a time (the rest at the next ticks), run with
    /// a decision per slice and per end that can change something, not one per step.
    @Test func aLargeGroupIsSubmittedInSlicesAndDecidedOnRarely() throws {
        var sim = try FlowSimulation(capacity: 50, handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(.group(Array(repeating: S.step("double", "1"), count: 2500)))
        let id = try Self.submit(spec, &sim)
        let slices = sim.queue.compactMap { action -> Int? in
            guard case .journal(.write(let changes, .flowSteps)) = action else { return nil }
            return changes.count
        }
        #expect(slices == [1000])
        var decisions = 0
        while try sim.step() || sim.scheduler.flows.runs[id] != nil {
            if sim.queue.isEmpty && sim.running.isEmpty { sim.tick() }
            decisions = max(decisions, sim.scheduler.flows.runs[id]?.decisions ?? 0)
        }
        let expected = "[" + Array(repeating: "2", count: 2500).joined(separator: ",") + "]"
        #expect(try Self.outcome(id, sim) == (.succeeded, expected))
        #expect(sim.executions.count == 2500)
        // A few a slice (its answer, a tick), one at the end: not one a step.
        #expect(decisions < 20, "decided \(decisions) times")
    }

    /// A chain of 2,000 steps: each decision starts where the chain's settled steps end and
    /// stops at its running step, so the nodes looked at over the whole run grow with the chain,
    /// not with its square (without that, about two million).
    @Test func aLongChainsDecisionsLookAtAFewNodesEach() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(.chain([S.step("inc", "0")] + Array(repeating: S.step("inc"), count: 1999)))
        let id = try Self.submit(spec, &sim)
        var visits = 0
        while try sim.step() { visits = max(visits, sim.scheduler.flows.runs[id]?.visits ?? 0) }
        #expect(try Self.outcome(id, sim) == (.succeeded, "2000"))
        #expect(visits < 20_000, "\(visits) nodes looked at")
    }

    /// Cancelling a flow of 3,000 waiting steps: one decision cancels them all, their ends go
    /// with the journal's next commits (not one commit each), and the flow ends once the last
    /// is on disk, with no decision per cancelled step.
    @Test func cancellingALargeFlowCostsItsSizeOnce() throws {
        var sim = try FlowSimulation(capacity: 1, handlers: S.handlers)
        defer { sim.remove() }
        let spec = FlowSpec(.group(Array(repeating: S.step("nobody.serves", "1"), count: 3000)))
        let id = try Self.submit(spec, &sim)
        while sim.scheduler.flows.runs[id]?.live ?? 0 < 3000 {
            #expect(
                try sim.step()
                    || {
                        sim.tick(); return true
                    }())
        }
        let before = try #require(sim.scheduler.flows.runs[id]?.decisions)
        let cancel = RequestID(high: 9, low: 70)
        sim.request(BrokerService.jobCancel, id.bytes, cancel)
        var ownCommits = 0
        while !sim.queue.isEmpty {
            if case .journal(.write(let changes, .finished)) = sim.queue[0], changes.count > 0 { ownCommits += 1 }
            _ = try sim.step()
            if let run = sim.scheduler.flows.runs[id] {
                #expect(run.decisions - before <= 5, "decided \(run.decisions - before) times")
            }
        }
        #expect(ownCommits == 0, "cancelled steps' outcomes each in a commit of its own")
        #expect(try Self.outcome(id, sim).0 == .cancelled)
        #expect(try JobReport(decoding: try #require(sim.answer(cancel)).body).state == .cancelled)
    }

    /// `[200,400]` is 9 bytes: within a limit of 9, over one of 8.
    @Test(arguments: [8, 9])
    func aGroupWhoseResultWouldBeOverTheFrameLimitFails(limit: Int) throws {
        var sim = try FlowSimulation(handlers: S.handlers, maxFrameSize: Int64(limit))
        defer { sim.remove() }
        let id = try Self.submit(FlowSpec(.group([S.step("double", "100"), S.step("double", "200")])), &sim)
        try sim.run()
        let (state, body) = try Self.outcome(id, sim)
        if limit == 9 {
            #expect(state == .succeeded && body == "[200,400]")
        } else {
            #expect(state == .failed && body.contains("over 8 bytes") && body.contains("step 1 (double"), "\(body)")
        }
    }

    /// A job submitted with a flow's step key would stand in for the step: refused.
    @Test func aJobCannotTakeAFlowsStepKey() throws {
        var sim = try FlowSimulation(handlers: S.handlers)
        defer { sim.remove() }
        var submission = JobSubmission(service: "double", body: Array("1".utf8))
        submission.idempotencyKey = FlowSpec.stepKey(flow: JobID(bytes: [UInt8](repeating: 1, count: 16))!, step: 1)
        let request = RequestID(high: 5, low: 1)
        sim.request(BrokerService.jobSubmit, submission.encode(), request)
        try sim.run()
        let reply = try #require(sim.answer(request))
        #expect(reply.status == .invalidPayload)
        #expect(String(decoding: reply.body, as: UTF8.self).contains("sky.flow/"))
    }

    static func status(_ id: JobID, _ sim: inout FlowSimulation) throws -> FlowStatus {
        let request = RequestID(high: 6, low: UInt64.random(in: 1...UInt64.max))
        sim.request(BrokerService.flowStatus, id.bytes, request)
        while sim.answer(request) == nil, try sim.step() {}
        return try FlowStatus(decoding: try #require(sim.answer(request)).body)
    }
}
