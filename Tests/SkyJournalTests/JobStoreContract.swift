import Foundation
import SkyJournal
import Testing

/// What every ``JobStore`` does, whatever keeps its jobs (a SQLite file, a PostgreSQL server):
/// the cases run against each store with a function that opens it again on the same data, as
/// a broker that stopped and started again does.
enum JobStoreContract: CaseIterable, Sendable {
    case unfinishedJobsAndOutcomesSurviveReopeningInSubmitOrder
    case aRetryBackoffIsKeptAsANotBeforeAndNeverReopensAnEndedJob
    case aReleasedStartIsQueuedAgainWithItsAttemptTakenBackAndNeverReopensAnEndedJob
    case anOutcomeIsRecordedOnce
    case aSecondSubmitWithTheSameKeyOrIDWritesNothing
    case expiredOutcomesAreDeletedInBatchesAndUnfinishedJobsNever
    case aJobsChangesInOneTransactionTakeEffectInTheirOrder
    case aScheduleIsKeptWithItsTickAndItsTicksJobInOneTransaction
    case aReleasedKeyIsTakenByTheNextJobAndAnEndedJobKeepsItsKey
    case aFlowsStepsAreReadByTheirKeysAndKeptAsLongAsTheFlow
    case aPausedServiceStaysPausedUntilResumed
    case aServicesLimitIsKeptUntilRemoved
    case aListingsCountStopsAtItsBound
    case aSelectionPagesByFilterAndAnEndedJobIsDeleted
    case theCountsOfJobsAndAnOutcomesProgressAreKept
    case aJobRecordedRunningOrEndedKeepsItsTimes
    case aJournalEmptiedOfItsJobsCountsNoneOfTheirBytes

    typealias Open = () throws(JournalError) -> any JobStore

    /// Runs this case on stores that `open` makes: each call opens the same data again (the
    /// store opened before is released first).
    func check(_ open: Open) throws {
        switch self {
        case .unfinishedJobsAndOutcomesSurviveReopeningInSubmitOrder:
            try Self.unfinishedJobsAndOutcomesSurviveReopeningInSubmitOrder(open)
        case .aRetryBackoffIsKeptAsANotBeforeAndNeverReopensAnEndedJob:
            try Self.aRetryBackoffIsKeptAsANotBeforeAndNeverReopensAnEndedJob(open)
        case .aReleasedStartIsQueuedAgainWithItsAttemptTakenBackAndNeverReopensAnEndedJob:
            try Self.aReleasedStartIsQueuedAgainWithItsAttemptTakenBackAndNeverReopensAnEndedJob(open)
        case .anOutcomeIsRecordedOnce: try Self.anOutcomeIsRecordedOnce(open)
        case .aSecondSubmitWithTheSameKeyOrIDWritesNothing: try Self.aSecondSubmitWithTheSameKeyOrIDWritesNothing(open)
        case .expiredOutcomesAreDeletedInBatchesAndUnfinishedJobsNever:
            try Self.expiredOutcomesAreDeletedInBatchesAndUnfinishedJobsNever(open)
        case .aJobsChangesInOneTransactionTakeEffectInTheirOrder:
            try Self.aJobsChangesInOneTransactionTakeEffectInTheirOrder(open)
        case .aScheduleIsKeptWithItsTickAndItsTicksJobInOneTransaction:
            try Self.aScheduleIsKeptWithItsTickAndItsTicksJobInOneTransaction(open)
        case .aReleasedKeyIsTakenByTheNextJobAndAnEndedJobKeepsItsKey:
            try Self.aReleasedKeyIsTakenByTheNextJobAndAnEndedJobKeepsItsKey(open)
        case .aFlowsStepsAreReadByTheirKeysAndKeptAsLongAsTheFlow:
            try Self.aFlowsStepsAreReadByTheirKeysAndKeptAsLongAsTheFlow(open)
        case .aPausedServiceStaysPausedUntilResumed:
            try Self.aPausedServiceStaysPausedUntilResumed(open)
        case .aServicesLimitIsKeptUntilRemoved:
            try Self.aServicesLimitIsKeptUntilRemoved(open)
        case .aListingsCountStopsAtItsBound:
            try Self.aListingsCountStopsAtItsBound(open)
        case .theCountsOfJobsAndAnOutcomesProgressAreKept:
            try Self.theCountsOfJobsAndAnOutcomesProgressAreKept(open)
        case .aSelectionPagesByFilterAndAnEndedJobIsDeleted:
            try Self.aSelectionPagesByFilterAndAnEndedJobIsDeleted(open)
        case .aJobRecordedRunningOrEndedKeepsItsTimes:
            try Self.aJobRecordedRunningOrEndedKeepsItsTimes(open)
        case .aJournalEmptiedOfItsJobsCountsNoneOfTheirBytes:
            try Self.aJournalEmptiedOfItsJobsCountsNoneOfTheirBytes(open)
        }
    }

    static func job(_ number: UInt8, key: String? = nil, priority: Int = 0) -> JobRecord {
        JobRecord(
            id: [UInt8](repeating: number, count: 16), service: "sky.echo", body: Array("task \(number)".utf8),
            priority: priority, notBefore: 1_000 * Int64(number), idempotencyKey: key, expiresAt: 86_400_000)
    }

    /// A unique job's key: held while the job holds it (a second job with it is a duplicate),
    /// given up before it ends in the same transaction (the next job takes it, across a
    /// reopening), an ended job's key is not given up, unless it expired (a key held for a
    /// time).
    private static func aReleasedKeyIsTakenByTheNextJobAndAnEndedJobKeepsItsKey(_ open: Open) throws {
        do {
            let store = try open()
            try store.apply([.submitted(job(1, key: "one"))])
            #expect(try store.apply([.submitted(job(2, key: "one"))]).duplicates[job(2).id]?.id == job(1).id)
            try store.apply([
                .keyReleased(id: job(1).id),
                .finished(id: job(1).id, state: .succeeded, outcome: [1], expiresAt: 99),
            ])
            #expect(try store.apply([.submitted(job(2, key: "one"))]).duplicates.isEmpty, "the key was given up")
            try store.apply([.finished(id: job(2).id, state: .failed, outcome: [2], expiresAt: 99)])
            try store.apply([.keyReleased(id: job(2).id)])
        }
        let store = try open()
        #expect(try store.job(idempotencyKey: "one")?.id == job(2).id, "an ended job keeps its key")
        #expect(try store.job(job(1).id)?.idempotencyKey == nil)
        #expect(try store.apply([.submitted(job(3, key: "one"))]).duplicates[job(3).id]?.id == job(2).id)
        // A key held for a time that passed: the ended job gives it up to the new one, in one
        // transaction.
        #expect(try store.apply([.keyExpired(id: job(2).id), .submitted(job(4, key: "one"))]).duplicates.isEmpty)
        #expect(try store.job(idempotencyKey: "one")?.id == job(4).id)
    }

    /// Paused services, across a reopening: pausing twice keeps one, resuming one that is not
    /// paused changes nothing, a pause and a resume of one service in one transaction take
    /// effect in their order.
    /// The counts of jobs saved last are read back after a reopen (zeros before any save); an
    /// outcome's progress is read with its job, and a job without one has none.
    private static func theCountsOfJobsAndAnOutcomesProgressAreKept(_ open: Open) throws {
        let totals = JobTotals(submitted: 7, succeeded: 4, failed: 2, cancelled: 1, retried: 3)
        do {
            let store = try open()
            #expect(try store.totals() == JobTotals())
            try store.apply([.totalsSaved(JobTotals(submitted: 1)), .submitted(job(1)), .submitted(job(2))])
            try store.apply([
                .finished(id: job(1).id, state: .failed, outcome: [1], expiresAt: 99, progress: [1, 2, 3]),
                .finished(id: job(2).id, state: .succeeded, outcome: [0], expiresAt: 99),
                .totalsSaved(totals),
            ])
        }
        let store = try open()
        #expect(try store.totals() == totals)
        #expect(try store.job(job(1).id)?.progress == [1, 2, 3])
        #expect(try store.job(job(2).id).map { $0.progress == nil } == true)
    }

    /// A job submitted running or ended (a call kept as a job after its caller left it) keeps
    /// the start or end its submit gives, alone in a write or with others.
    private static func aJobRecordedRunningOrEndedKeepsItsTimes(_ open: Open) throws {
        var running = job(1)
        running.state = .running
        running.attempt = 1
        running.startedAt = 5_000
        var ended = job(2)
        ended.state = .succeeded
        ended.outcome = [0]
        ended.endedAt = 7_000
        var alone = job(4)
        alone.state = .running
        alone.startedAt = 9_000
        do {
            let store = try open()
            try store.apply([.submitted(running), .submitted(ended), .submitted(job(3))])
            try store.apply([.submitted(alone)])
        }
        let store = try open()
        let times = try [1, 2, 3, 4].map { number in
            try store.job(job(number).id).map { [$0.startedAt, $0.endedAt] }
        }
        #expect(times == [[5_000, 0], [0, 7_000], [0, 0], [9_000, 0]])
    }

    /// What `--journal-max-bytes` compares: 40 jobs of 20 KB count their bytes, and once they
    /// ended and were deleted, the journal counts none of them, across a reopening too (a
    /// journal measured by its file or table size on disk stayed over its limit for good).
    private static func aJournalEmptiedOfItsJobsCountsNoneOfTheirBytes(_ open: Open) throws {
        let ids = (1...40).map { UInt8($0) }
        do {
            let store = try open()
            try store.apply(
                ids.map { number in
                    var big = job(number)
                    // Bytes that do not compress (PostgreSQL compresses a large value).
                    var state = UInt64(number) &* 0x9E37_79B9_7F4A_7C15
                    big.body = (0..<20_000).map { _ in
                        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                        return UInt8(truncatingIfNeeded: state >> 56)
                    }
                    return .submitted(big)
                })
            #expect(try store.byteCount() >= 40 * 20_000)
            try store.apply(ids.map { .finished(id: job($0).id, state: .cancelled, outcome: [9], expiresAt: 10) })
            #expect(try store.deleteExpired(before: 11, limit: 100) == 40)
            let left = try store.byteCount()
            #expect(left < 100_000, "\(left) bytes")
        }
        #expect(try open().byteCount() < 100_000)
    }

    private static func aPausedServiceStaysPausedUntilResumed(_ open: Open) throws {
        do {
            let store = try open()
            #expect(try store.pausedServices().isEmpty)
            try store.apply([
                .servicePaused(name: "b", paused: true), .servicePaused(name: "a", paused: true),
                .servicePaused(name: "a", paused: true), .servicePaused(name: "c", paused: false),
                .servicePaused(name: "d", paused: true), .servicePaused(name: "d", paused: false),
            ])
        }
        let store = try open()
        #expect(try store.pausedServices() == ["a", "b"])
        try store.apply([.servicePaused(name: "a", paused: false)])
        #expect(try store.pausedServices() == ["b"])
    }

    /// A listing's count of matches: by state and service as the listing filters, and no
    /// further than its bound.
    private static func aListingsCountStopsAtItsBound(_ open: Open) throws {
        let store = try open()
        try store.apply((0..<5).map { .submitted(job($0)) })
        #expect(try store.count(state: nil, service: nil, atMost: 100) == 5)
        #expect(try store.count(state: nil, service: nil, atMost: 3) == 3)
        #expect(try store.count(state: .queued, service: job(0).service, atMost: 100) == 5)
        #expect(try store.count(state: .failed, service: nil, atMost: 100) == 0)
        #expect(try store.count(state: nil, service: "no.such", atMost: 100) == 0)
    }

    /// A bulk action's selection: by state, service and submit time, oldest first, a page after
    /// another; a failed or cancelled job's outcome only; a delete takes an ended job only.
    private static func aSelectionPagesByFilterAndAnEndedJobIsDeleted(_ open: Open) throws {
        var jobs = (1...6).map { job(UInt8($0)) }
        do {
            let store = try open()
            for index in jobs.indices { jobs[index].submittedAt = 1_000 * Int64(index + 1) }
            jobs[5].service = "other"
            try store.apply(jobs.map { .submitted($0) })
            try store.apply([
                .finished(id: jobs[0].id, state: .failed, outcome: [1, 9], expiresAt: 86_400_000),
                .finished(id: jobs[1].id, state: .succeeded, outcome: [0, 7], expiresAt: 86_400_000),
                .finished(id: jobs[2].id, state: .cancelled, outcome: [5], expiresAt: 86_400_000),
            ])
            let all = try store.select(JobSelection(), after: 0, limit: 100)
            #expect(all.map(\.id) == jobs.map(\.id), "oldest first")
            #expect(
                all.map(\.outcome) == [[1, 9], nil, [5], nil, nil, nil], "a failed or cancelled job's outcome only")
            #expect(all[5].service == "other" && all[0].state == .failed)
            let first = try store.select(JobSelection(), after: 0, limit: 2)
            let second = try store.select(JobSelection(), after: try #require(first.last).seq, limit: 2)
            #expect((first + second).map(\.id) == Array(jobs.prefix(4)).map(\.id), "pages follow on")
            #expect(try store.select(JobSelection(state: .queued), after: 0, limit: 100).count == 3)
            #expect(try store.select(JobSelection(service: "other"), after: 0, limit: 100).map(\.id) == [jobs[5].id])
            let window = JobSelection(submittedAfter: 2_000, submittedBefore: 4_000)
            #expect(try store.select(window, after: 0, limit: 100).map(\.id) == [jobs[1].id, jobs[2].id])
            // An unfinished job is not deleted; an ended one is, and stays so after a reopening.
            try store.apply([.deleted(id: jobs[0].id), .deleted(id: jobs[3].id)])
        }
        let reopened = try open()
        #expect(try reopened.job(jobs[0].id) == nil)
        #expect(try reopened.job(jobs[3].id)?.state == .queued)
        #expect(try reopened.select(JobSelection(), after: 0, limit: 100).count == 5)
    }

    /// Services' rate limits, across a reopening: the last one set of a service is kept (in
    /// the form written), a removal takes it out, and changes of one transaction apply in order.
    private static func aServicesLimitIsKeptUntilRemoved(_ open: Open) throws {
        do {
            let store = try open()
            #expect(try store.serviceLimits().isEmpty)
            try store.apply([
                .serviceLimited(name: "b", limit: [1]), .serviceLimited(name: "a", limit: [2]),
                .serviceLimited(name: "a", limit: [3, 3]), .serviceLimited(name: "c", limit: nil),
                .serviceLimited(name: "d", limit: [4]), .serviceLimited(name: "d", limit: nil),
            ])
        }
        let store = try open()
        #expect(try store.serviceLimits().map { "\($0.name)=\($0.limit)" } == ["a=[3, 3]", "b=[1]"])
        try store.apply([.serviceLimited(name: "a", limit: nil)])
        #expect(try store.serviceLimits().map(\.name) == ["b"])
    }

    /// A flow's steps: read at once by their keys (a key no job holds is left out), kept until
    /// the flow's end says how long (an unfinished job's expiry is left as it is), and its end
    /// written with them in one transaction.
    private static func aFlowsStepsAreReadByTheirKeysAndKeptAsLongAsTheFlow(_ open: Open) throws {
        do {
            let store = try open()
            try store.apply([.submitted(job(1, key: "f/0")), .submitted(job(2, key: "f/1")), .submitted(job(3))])
            try store.apply([.finished(id: job(1).id, state: .succeeded, outcome: [1], expiresAt: .max)])
            #expect(try store.jobs(idempotencyKeys: []).isEmpty)
            #expect(Set(try store.jobs(idempotencyKeys: ["f/0", "f/1", "f/2"]).map(\.id)) == [job(1).id, job(2).id])
            try store.apply([
                .finished(id: job(2).id, state: .failed, outcome: [2], expiresAt: .max),
                .retained(id: job(1).id, expiresAt: 500), .retained(id: job(2).id, expiresAt: 500),
                .retained(id: job(3).id, expiresAt: 500),
            ])
        }
        let store = try open()
        #expect(try store.job(job(1).id)?.expiresAt == 500)
        #expect(try store.job(job(2).id)?.expiresAt == 500, "ended and retained in one transaction")
        #expect(try store.job(job(3).id)?.expiresAt == 86_400_000, "an unfinished job keeps its own")
        #expect(try store.deleteExpired(before: 501, limit: 10) == 2)
        #expect(try store.jobs(idempotencyKeys: ["f/0", "f/1"]).isEmpty)
    }

    /// A schedule saved, its tick recorded with the tick's job in one transaction, saved again
    /// (its definition replaced, its last job kept), a tick that made no job (its last job
    /// kept), and removed.
    private static func aScheduleIsKeptWithItsTickAndItsTicksJobInOneTransaction(_ open: Open) throws {
        do {
            let store = try open()
            try store.apply([
                .scheduleSaved(ScheduleRecord(name: "b", spec: [2], nextFire: 5)),
                .scheduleSaved(ScheduleRecord(name: "a", spec: [1], nextFire: 10)),
            ])
            try store.apply([
                .submitted(job(1, key: "tick-10")), .scheduleAdvanced(name: "a", nextFire: 20, lastJob: job(1).id),
            ])
            try store.apply([.scheduleSaved(ScheduleRecord(name: "a", spec: [3], nextFire: 20))])
            try store.apply([.scheduleAdvanced(name: "b", nextFire: 6, lastJob: nil)])
        }
        let store = try open()
        #expect(
            try store.schedules() == [
                ScheduleRecord(name: "a", spec: [3], nextFire: 20, lastJob: job(1).id),
                ScheduleRecord(name: "b", spec: [2], nextFire: 6),
            ])
        #expect(try store.unfinished().map(\.id) == [job(1).id])
        try store.apply([.scheduleRemoved(name: "b")])
        #expect(try store.schedules().map(\.name) == ["a"])
    }

    private static func unfinishedJobsAndOutcomesSurviveReopeningInSubmitOrder(_ open: Open) throws {
        do {
            let store = try open()
            try store.apply((1...5).map { .submitted(job($0, priority: Int($0) % 2)) })
            try store.apply([.started(id: job(2).id, attempt: 1)])
            try store.apply([.finished(id: job(3).id, state: .succeeded, outcome: [42], expiresAt: 99)])
        }
        let store = try open()
        let unfinished = try store.unfinished()
        #expect(unfinished.map { $0.id[0] } == [1, 2, 4, 5])
        #expect(unfinished[0] == job(1, priority: 1), "every field as written")
        #expect(unfinished[1].state == .running && unfinished[1].attempt == 1)
        let done = try #require(try store.job(job(3).id))
        #expect(done.state == .succeeded && done.outcome == [42] && done.expiresAt == 99)
        #expect(try store.job([UInt8](repeating: 9, count: 16)) == nil)
    }

    private static func aRetryBackoffIsKeptAsANotBeforeAndNeverReopensAnEndedJob(_ open: Open) throws {
        do {
            let store = try open()
            try store.apply([.submitted(job(1)), .submitted(job(2))])
            try store.apply([.started(id: job(1).id, attempt: 1), .started(id: job(2).id, attempt: 1)])
            try store.apply([.finished(id: job(2).id, state: .succeeded, outcome: [1], expiresAt: 10)])
            try store.apply([
                .rescheduled(id: job(1).id, notBefore: 123_456), .rescheduled(id: job(2).id, notBefore: 7),
            ])
        }
        let store = try open()
        let waiting = try #require(try store.unfinished().first)
        #expect(waiting.id == job(1).id && waiting.state == .queued)
        #expect(waiting.notBefore == 123_456 && waiting.attempt == 1, "waits for its backoff; its attempt counts on")
        #expect(try store.job(job(2).id)?.state == .succeeded)
    }

    private static func aReleasedStartIsQueuedAgainWithItsAttemptTakenBackAndNeverReopensAnEndedJob(_ open: Open) throws
    {
        do {
            let store = try open()
            try store.apply([.submitted(job(1)), .submitted(job(2))])
            try store.apply([.started(id: job(1).id, attempt: 3), .started(id: job(2).id, attempt: 1)])
            try store.apply([.finished(id: job(2).id, state: .cancelled, outcome: [1], expiresAt: 10)])
            try store.apply([.released(id: job(1).id, attempt: 2), .released(id: job(2).id, attempt: 0)])
        }
        let store = try open()
        let waiting = try #require(try store.unfinished().first)
        #expect(waiting.id == job(1).id && waiting.state == .queued && waiting.attempt == 2)
        let ended = try #require(try store.job(job(2).id))
        #expect(ended.state == .cancelled && ended.attempt == 1, "an ended job keeps what it had")
    }

    private static func anOutcomeIsRecordedOnce(_ open: Open) throws {
        try recordOnce(open)
        // The times are the first outcome's, read back after a reopening, in a listing too.
        let again = try open()
        #expect(try again.job(job(1).id).map { [$0.startedAt, $0.endedAt] } == [1_000, 1_250])
        #expect(try again.list(state: .succeeded, service: nil, limit: 10).first?.endedAt == 1_250)
    }

    private static func recordOnce(_ open: Open) throws {
        let store = try open()
        try store.apply([.submitted(job(1))])
        try store.apply([
            .finished(id: job(1).id, state: .succeeded, outcome: [1], expiresAt: 10, startedAt: 1_000, endedAt: 1_250)
        ])
        // A late second delivery's outcome, and a restart that would deliver it again.
        try store.apply([
            .finished(id: job(1).id, state: .failed, outcome: [2], expiresAt: 20, startedAt: 2_000, endedAt: 2_500)
        ])
        try store.apply([.started(id: job(1).id, attempt: 2)])
        let job = try #require(try store.job(job(1).id))
        #expect(job.state == .succeeded && job.outcome == [1] && job.attempt == 0)
        #expect(job.startedAt == 1_000 && job.endedAt == 1_250)
    }

    private static func aSecondSubmitWithTheSameKeyOrIDWritesNothing(_ open: Open) throws {
        let store = try open()
        try store.apply([.submitted(job(1, key: "order-7"))])
        try store.apply([.submitted(job(2, key: "order-7")), .submitted(job(1))])
        #expect(try store.unfinished().count == 1)
        #expect(try store.job(idempotencyKey: "order-7")?.id == job(1).id)
        #expect(try store.job(idempotencyKey: "order-8") == nil)
        // A submit whose id another job has (a kept call's id is its client's) names that job;
        // a job of its own, inserted and changed in the same transaction, is no duplicate.
        var other = job(1)
        other.service = "sky.other"
        let receipt = try store.apply([
            .submitted(other), .submitted(job(3)),
            .finished(id: job(3).id, state: .succeeded, outcome: [3], expiresAt: 99),
        ])
        #expect(receipt.duplicates[job(1).id]?.service == "sky.echo")
        #expect(receipt.duplicates[job(3).id] == nil)
        #expect(try store.job(job(1).id)?.service == "sky.echo", "nothing written over it")
    }

    private static func expiredOutcomesAreDeletedInBatchesAndUnfinishedJobsNever(_ open: Open) throws {
        let store = try open()
        try store.apply((1...30).map { .submitted(job($0)) })
        try store.apply(
            (1...25).map { .finished(id: job($0).id, state: .succeeded, outcome: [], expiresAt: Int64($0)) })
        #expect(try store.deleteExpired(before: 21, limit: 8) == 8)
        #expect(try store.deleteExpired(before: 21, limit: 8) == 8)
        #expect(try store.deleteExpired(before: 21, limit: 8) == 4, "only the 20 that expired before 21")
        #expect(try store.deleteExpired(before: 1_000, limit: 100) == 5)
        #expect(try store.unfinished().count == 5)
    }

    /// A group commit may carry several changes of one job (a fast job's start and outcome, a
    /// start prepared and taken back): each takes effect in its order, as in transactions of
    /// their own, beside other jobs' changes and a submit whose key is taken in the same one.
    private static func aJobsChangesInOneTransactionTakeEffectInTheirOrder(_ open: Open) throws {
        let store = try open()
        let (one, two, three, four) = (job(1).id, job(2).id, job(3).id, job(4).id)
        let receipt = try store.apply([
            .submitted(job(1)), .started(id: one, attempt: 1), .submitted(job(2, key: "k")),
            .released(id: one, attempt: 0), .submitted(job(3, key: "k")), .started(id: two, attempt: 1),
            .started(id: one, attempt: 1), .rescheduled(id: two, notBefore: 5_000), .submitted(job(4)),
            .finished(id: one, state: .succeeded, outcome: [9], expiresAt: 86_400_000),
            .finished(id: one, state: .failed, outcome: [8], expiresAt: 86_400_000), .started(id: four, attempt: 1),
            .finished(id: four, state: .cancelled, outcome: nil, expiresAt: 86_400_000),
        ])
        #expect(receipt.duplicates.keys.sorted { $0.lexicographicallyPrecedes($1) } == [three])
        #expect(receipt.duplicates[three]?.id == two)
        let first = try #require(try store.job(one))
        #expect((first.state, first.attempt, first.outcome) == (.succeeded, 1, [9]))
        let second = try #require(try store.job(two))
        #expect((second.state, second.attempt, second.notBefore) == (.queued, 1, 5_000))
        #expect(try store.job(three) == nil)
        let fourth = try #require(try store.job(four))
        #expect((fourth.state, fourth.attempt, fourth.outcome) == (.cancelled, 1, nil))
        #expect(try store.unfinished().map(\.id) == [two])
    }
}
