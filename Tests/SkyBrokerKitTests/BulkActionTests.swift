import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// `mmi.jobs.bulk` on the job scheduler with a real SQLite journal: what a filter selects, each
/// action on what it applies to, a retry once per job, the guard against no filter, one at a
/// time.
@Suite("Job scheduler: bulk actions by filter")
struct BulkActionTests {
    private static let handlers: [String: FlowSimulation.Handler] = [
        "fail": { _ in (.handlerError, RemoteErrorBody(type: "Broken", message: "it broke").encoded()) },
        "late": { _ in (.handlerError, RemoteErrorBody(type: "TooSlow", message: "late").encoded()) },
        "double": { body in (.ok, Array("\(FlowServices.number(body) * 2)".utf8)) },
    ]

    private var next: UInt64 = 1

    /// Submits `count` jobs of `service`; returns their ids once on disk.
    private mutating func submit(_ count: Int, _ service: String, _ sim: inout FlowSimulation) throws -> [JobID] {
        var requests: [RequestID] = []
        for index in 0..<count {
            let request = RequestID(high: 1, low: next)
            next += 1
            sim.request(
                BrokerService.jobSubmit, JobSubmission(service: service, body: Array("\(index)".utf8)).encode(), request
            )
            requests.append(request)
        }
        try sim.run()
        return try requests.map { request in
            let reply = try #require(sim.answer(request))
            return try #require(JobID(bytes: reply.body))
        }
    }

    /// Runs a bulk action to its answer.
    private mutating func bulk(
        _ kind: BulkAction.Kind, _ filter: JobFilter, all: Bool = false, _ sim: inout FlowSimulation
    ) throws -> TaskReply {
        let request = RequestID(high: 2, low: next)
        next += 1
        sim.request(BrokerService.jobBulk, BulkAction(kind, filter: filter, all: all).encode(), request)
        while sim.answer(request) == nil, try sim.step() {}
        return try #require(sim.answer(request))
    }

    private mutating func outcome(
        _ kind: BulkAction.Kind, _ filter: JobFilter, all: Bool = false, _ sim: inout FlowSimulation
    ) throws -> BulkOutcome {
        let reply = try bulk(kind, filter, all: all, &sim)
        #expect(reply.status == .ok, "\(String(decoding: reply.body, as: UTF8.self))")
        return try BulkOutcome(decoding: reply.body)
    }

    @Test mutating func aCountSelectsByStateServiceAndErrorTypeAndCountsTheTypes() throws {
        var sim = try FlowSimulation(handlers: Self.handlers)
        defer { sim.remove() }
        _ = try submit(30, "fail", &sim)
        _ = try submit(5, "late", &sim)
        _ = try submit(10, "double", &sim)
        let failed = try outcome(.count, JobFilter(state: .failed), &sim)
        #expect(failed.matched == 35 && failed.acted == 0 && failed.left == 0)
        #expect(failed.errorTypes.map(\.type) == ["Broken", "TooSlow"])
        #expect(failed.errorTypes.map(\.count) == [30, 5])
        #expect(try outcome(.count, JobFilter(errorType: "Broken"), &sim).matched == 30)
        #expect(try outcome(.count, JobFilter(service: "late"), &sim).matched == 5)
        #expect(try outcome(.count, JobFilter(state: .succeeded), &sim).errorTypes.isEmpty)
        #expect(try outcome(.count, JobFilter(), &sim).matched == 45, "a count needs no filter")
        let wall = FlowSimulation.wall
        #expect(try outcome(.count, JobFilter(submittedAfter: wall), &sim).matched == 45)
        #expect(try outcome(.count, JobFilter(submittedAfter: wall + 1), &sim).matched == 0)
        #expect(try outcome(.count, JobFilter(submittedBefore: wall), &sim).matched == 0)
        // A time of 0 (or before) is a time, not "any": it selects nothing here, and makes a filter.
        #expect(try outcome(.count, JobFilter(submittedBefore: 0), &sim).matched == 0)
        #expect(try outcome(.delete, JobFilter(submittedBefore: -1), &sim).matched == 0)
    }

    @Test mutating func anActionWithNoFilterIsRefusedUnlessItSaysAll() throws {
        var sim = try FlowSimulation(handlers: Self.handlers)
        defer { sim.remove() }
        _ = try submit(3, "double", &sim)
        for kind in [BulkAction.Kind.retry, .cancel, .delete] {
            let reply = try bulk(kind, JobFilter(), &sim)
            #expect(reply.status == .invalidPayload)
            #expect(String(decoding: reply.body, as: UTF8.self).contains("no filter"))
        }
        #expect(try outcome(.count, JobFilter(), &sim).matched == 3, "nothing was deleted")
        #expect(try outcome(.delete, JobFilter(), all: true, &sim).acted == 3)
        #expect(try outcome(.count, JobFilter(), &sim).matched == 0)
    }

    /// Each failed job runs again as a new job, once: a second retry of it finds the job the
    /// first made.
    @Test mutating func aRetryRunsEachFailedJobAgainOnce() throws {
        var sim = try FlowSimulation(handlers: Self.handlers)
        defer { sim.remove() }
        _ = try submit(600, "fail", &sim)
        _ = try submit(4, "double", &sim)
        let retried = try outcome(.retry, JobFilter(state: .failed), &sim)
        #expect(retried.matched == 600 && retried.acted == 600)
        try sim.run()
        #expect(try outcome(.count, JobFilter(state: .failed), &sim).matched == 1_200, "the new ones failed too")
        // The same again: the 600 old ones find their new jobs; the 600 new ones run again.
        let again = try outcome(.retry, JobFilter(state: .failed), &sim)
        #expect(again.matched == 1_200 && again.acted == 600 && again.retriedBefore == 600, "\(again)")
        try sim.run()
        #expect(try outcome(.count, JobFilter(), &sim).matched == 1_804, "600 more jobs, not 1,200")
        // A succeeded job is not retried.
        let succeeded = try outcome(.retry, JobFilter(service: "double"), &sim)
        #expect(succeeded.matched == 4 && succeeded.acted == 0)
    }

    @Test mutating func aDeleteTakesEndedJobsOnlyAndTheirIdsBecomeUnknown() throws {
        var sim = try FlowSimulation(capacity: 0, handlers: Self.handlers)
        defer { sim.remove() }
        let queued = try submit(3, "double", &sim)
        let deleted = try outcome(.delete, JobFilter(service: "double"), &sim)
        #expect(deleted.matched == 3 && deleted.acted == 0, "queued jobs are not deleted")
        let cancelled = try outcome(.cancel, JobFilter(state: .queued), &sim)
        #expect(cancelled.matched == 3 && cancelled.acted == 3)
        try sim.run()
        #expect(try sim.record(queued[0])?.state == .cancelled)
        #expect(try outcome(.delete, JobFilter(state: .cancelled), &sim).acted == 3)
        #expect(try sim.record(queued[0]) == nil)
    }

    /// A failed job waits for an operator longer than its own retention (24 h by default).
    @Test mutating func aFailedJobIsKeptForTheFailedRetentionAndASucceededOneForItsOwn() throws {
        var sim = try FlowSimulation(handlers: Self.handlers)
        defer { sim.remove() }
        let failed = try submit(1, "fail", &sim)
        let succeeded = try submit(1, "double", &sim)
        #expect(try sim.record(failed[0])?.expiresAt == FlowSimulation.wall + 7 * 86_400_000)
        #expect(try sim.record(succeeded[0])?.expiresAt == FlowSimulation.wall + 86_400_000)
    }

    @Test mutating func oneBulkActionAtATime() throws {
        var sim = try FlowSimulation(handlers: Self.handlers)
        defer { sim.remove() }
        _ = try submit(3, "fail", &sim)
        let first = RequestID(high: 3, low: 1)
        sim.request(BrokerService.jobBulk, BulkAction(.retry, filter: JobFilter(state: .failed)).encode(), first)
        let second = RequestID(high: 3, low: 2)
        sim.request(BrokerService.jobBulk, BulkAction(.count, filter: JobFilter()).encode(), second)
        try sim.run()
        #expect(sim.answer(second)?.status == .overloaded, "asked while the first was under way")
        let reply = try #require(sim.answer(first))
        #expect(try BulkOutcome(decoding: reply.body).acted == 3)
    }

    @Test func aBulkActionAndItsOutcomeReadBackAsWritten() throws {
        let action = BulkAction(
            .delete,
            filter: JobFilter(
                state: .cancelled, service: "svc", submittedAfter: -5, submittedBefore: 1_700_000_000_000,
                errorType: "Broken"), all: true)
        #expect(try BulkAction(decoding: action.encode()) == action)
        let outcome = BulkOutcome(matched: 7, acted: 3, left: 2, errorTypes: [("a", 5), ("b", 2)], retriedBefore: 1)
        #expect(try BulkOutcome(decoding: outcome.encode()) == outcome)
        #expect(throws: ProtocolError.self) { try BulkAction(decoding: [2] + action.encode().dropFirst()) }
        #expect(throws: ProtocolError.self) { try BulkAction(decoding: Array(action.encode().dropLast())) }
    }
}
