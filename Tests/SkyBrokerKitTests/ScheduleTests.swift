import SkyJournal
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Schedules driven through the job scheduler with both clocks moved by hand: the broker's
/// (ticks) and the wall clock (the ticks' times).
@Suite("Schedules: each tick fires once, with its overlap and catch-up policies")
struct ScheduleTests {
    /// 2023-11-14T22:13:20.500Z: half a second before a whole second.
    static let start: Int64 = 1_700_000_000_500

    struct Harness {
        var jobs: SchedulerHarness
        let wall: Locked<Int64>

        init(loading records: [ScheduleRecord] = [], at wall: Int64 = ScheduleTests.start) {
            let clock = Locked(wall)
            self.wall = clock
            jobs = SchedulerHarness { $0.wallClock = { clock.withLock { $0 } } }
            _ = jobs.journal(.schedulesLoaded(.success(records)))
        }

        mutating func at(_ milliseconds: Int64) -> [JobScheduler.Action] {
            wall.withLock { $0 = milliseconds }
            return jobs.tick()
        }

        mutating func save(_ spec: ScheduleSpec, _ request: RequestID = RequestID(high: 7, low: 1)) -> [UInt8]? {
            let asked = jobs.request(BrokerService.scheduleSave, spec.encode(), request)
            let done = jobs.journal(.written(writes(in: asked)[0], .success(JournalReceipt())))
            return Self.answer(in: done, to: request)
        }

        static func answer(in actions: [JobScheduler.Action], to request: RequestID) -> [UInt8]? {
            actions.lazy.compactMap { action -> [UInt8]? in
                guard case .answer(let caller, let reply) = action, caller.requestID == request else { return nil }
                return reply.status == .ok ? Array(reply.body) : nil
            }.first
        }

        /// The statuses of the answers among `actions`.
        static func statuses(in actions: [JobScheduler.Action]) -> [ReplyStatus] {
            actions.compactMap { action -> ReplyStatus? in
                guard case .answer(_, let reply) = action else { return nil }
                return reply.status
            }
        }

        /// The jobs a tick's write makes, by their idempotency keys' ticks.
        static func firedTicks(in actions: [JobScheduler.Action]) -> [Int64] {
            changes(in: actions).compactMap { change in
                guard case .submitted(let record) = change, let key = record.idempotencyKey else { return nil }
                return Int64(key.split(separator: "/").last!)
            }
        }

        /// Answers every write among `actions` as durable.
        mutating func commit(_ actions: [JobScheduler.Action]) -> [JobScheduler.Action] {
            writes(in: actions).flatMap { jobs.journal(.written($0, .success(JournalReceipt()))) }
        }
    }

    static func everySecond(_ name: String = "beat") -> ScheduleSpec {
        ScheduleSpec(name: name, timing: .every(milliseconds: 1000), job: JobSubmission(service: "sky.echo", body: [1]))
    }

    @Test func aTickFiresOnceAndItsJobIsRecordedWithIt() throws {
        var schedules = Harness()
        let saved = schedules.save(Self.everySecond())
        // A free credit: the tick's job has its first start recorded with it, and its events
        // still say that no attempt reached a worker.
        var joined: [JobScheduler.Action] = []
        schedules.jobs.scheduler.workerJoined(serving: ["sky.echo"], capacity: 1, into: &joined)
        let next = try #require(saved)
        #expect(next == withUnsafeBytes(of: Int64(1_700_000_001_000).bigEndian, Array.init))
        #expect(changes(in: schedules.at(1_700_000_000_999)).isEmpty, "not before its tick")
        let fired = schedules.at(1_700_000_001_000)
        #expect(Harness.firedTicks(in: fired) == [1_700_000_001_000])
        // The job and the schedule's next tick in one write.
        let written = changes(in: fired)
        #expect(written.count == 2)
        guard case .scheduleAdvanced("beat", 1_700_000_002_000, let last?) = written.last else {
            Issue.record("\(written)")
            return
        }
        #expect(Harness.firedTicks(in: schedules.at(1_700_000_001_500)).isEmpty, "nothing while its write is in flight")
        let committed = schedules.commit(fired)
        let job = try #require(JobID(bytes: last))
        #expect(schedules.jobs.scheduler.book.jobs[job] != nil, "recorded, the job is held and waits for a worker")
        // Once on disk: the job's `job.submitted`, then `schedule.fired` naming the tick.
        let published = committed.compactMap { action -> (EventKind, JobScheduler.JobEvent)? in
            if case .publish(let kind, let event) = action { (kind, event) } else { nil }
        }
        #expect(published.map(\.0) == [.jobSubmitted, .scheduleFired])
        #expect(published.last?.1.id == job)
        #expect(published.last?.1.schedule == ScheduleTick(name: "beat", tick: "2023-11-14T22:13:21.000Z"))
        #expect(published.map(\.1.attempt) == [0, 0])
        let counts = try #require(schedules.jobs.scheduler.counts()?.schedules)
        #expect(
            counts == ScheduleCounts(count: 1, paused: 0, fired: 1, skipped: 0, nextFire: "2023-11-14T22:13:22.000Z"))
        #expect(changes(in: schedules.at(1_700_000_001_900)).isEmpty, "once per tick")
    }

    /// A write that fails leaves the tick due: it fires again at the next tick of the broker's
    /// clock, with the same idempotency key, so that a commit whose outcome was unknown cannot
    /// make a second job.
    @Test func aTickWhoseWriteFailedFiresAgainWithTheSameKey() throws {
        var schedules = Harness()
        _ = schedules.save(Self.everySecond())
        let first = schedules.at(1_700_000_001_000)
        let keys = changes(in: first).compactMap { change -> String? in
            if case .submitted(let record) = change { record.idempotencyKey } else { nil }
        }
        _ = writes(in: first).flatMap {
            schedules.jobs.journal(.written($0, .failure(.cannotConnect(store: "s", reason: "r"))))
        }
        let again = changes(in: schedules.at(1_700_000_001_100)).compactMap { change -> String? in
            if case .submitted(let record) = change { record.idempotencyKey } else { nil }
        }
        #expect(again == keys && keys.count == 1)
    }

    /// The overlap policies, with the previous tick's job still held (no worker takes it).
    @Test(arguments: [
        (ScheduleSpec.Overlap.skip, 0, false), (.allow, 1, false), (.cancelPrevious, 1, true),
    ])
    func overlap(_ policy: ScheduleSpec.Overlap, _ jobs: Int, _ cancels: Bool) throws {
        var schedules = Harness()
        var spec = Self.everySecond()
        spec.overlap = policy
        _ = schedules.save(spec)
        _ = schedules.commit(schedules.at(1_700_000_001_000))
        let second = schedules.at(1_700_000_002_000)
        #expect(Harness.firedTicks(in: second).count == jobs)
        let cancelled = changes(in: second).contains { change in
            if case .finished(_, .cancelled, _, _, _, _, _) = change { true } else { false }
        }
        #expect(cancelled == cancels)
        #expect(schedules.jobs.scheduler.counts()?.schedules?.skipped == (policy == .skip ? 1 : 0))
        // Skipped, the tick still passes: its next is recorded.
        #expect(
            changes(in: second).contains(
                .scheduleAdvanced(name: "beat", nextFire: 1_700_000_003_000, lastJob: nil)) == (jobs == 0))
    }

    /// Queued, a tick waits for the previous run: nothing is written while it runs (so a
    /// broker that restarts meanwhile waits too), and once it ended the ticks that passed fire
    /// as one, the latest.
    @Test func aQueuedTickWaitsForThePreviousRunAndFiresAsTheLatest() throws {
        var schedules = Harness()
        var spec = Self.everySecond()
        spec.overlap = .queue
        _ = schedules.save(spec)
        let first = schedules.at(1_700_000_001_000)
        let previous = try #require(
            changes(in: first).compactMap { if case .submitted(let r) = $0 { r.id } else { nil } }.first)
        _ = schedules.commit(first)
        #expect(changes(in: schedules.at(1_700_000_002_000)).isEmpty, "it waits: nothing fires, nothing passes")
        #expect(changes(in: schedules.at(1_700_000_003_500)).isEmpty)
        let cancel = RequestID(high: 9, low: 1)
        _ = schedules.commit(schedules.jobs.request(BrokerService.jobCancel, previous, cancel))
        let fired = schedules.at(1_700_000_003_600)
        #expect(Harness.firedTicks(in: fired) == [1_700_000_003_000])
        #expect(
            changes(in: fired).last.map {
                if case .scheduleAdvanced(_, 1_700_000_004_000, _?) = $0 { true } else { false }
            } == true)
    }

    /// A broker that starts with a schedule whose ticks passed while no broker ran: none, the
    /// last, or the last few fire, as its catch-up policy says.
    @Test(arguments: [
        (ScheduleSpec.CatchUp.none, [Int64]()), (.last, [1_700_000_009_000]),
        (.all(limit: 3), [1_700_000_007_000, 1_700_000_008_000, 1_700_000_009_000]),
    ])
    func catchUp(_ policy: ScheduleSpec.CatchUp, _ expected: [Int64]) throws {
        var spec = Self.everySecond()
        spec.catchUp = policy
        spec.overlap = .allow
        // Down from 1_700_000_001_000 to 1_700_000_009_500: nine ticks missed.
        let record = ScheduleRecord(name: "beat", spec: spec.encode(), nextFire: 1_700_000_001_000)
        var schedules = Harness(loading: [record], at: 1_700_000_009_500)
        let fired = schedules.at(1_700_000_009_500)
        #expect(Harness.firedTicks(in: fired) == expected)
        #expect(
            changes(in: fired).last
                == .scheduleAdvanced(
                    name: "beat", nextFire: 1_700_000_010_000,
                    lastJob: changes(in: fired).compactMap {
                        if case .submitted(let r) = $0 { r.id } else { nil }
                    }.last))
        // The ticks after the start fire as usual.
        _ = schedules.commit(fired)
        #expect(Harness.firedTicks(in: schedules.at(1_700_000_010_000)) == [1_700_000_010_000])
    }

    /// Paused, a schedule fires nothing; resumed, it fires from then on, and the ticks it
    /// missed meanwhile do not fire. Removed, it fires no more.
    @Test func pauseResumeRemoveTriggerAndList() throws {
        var schedules = Harness()
        _ = schedules.save(Self.everySecond())
        let name = Array("beat".utf8)
        let pause = RequestID(high: 8, low: 1)
        _ = schedules.commit(schedules.jobs.request(BrokerService.schedulePause, name, pause))
        #expect(changes(in: schedules.at(1_700_000_005_000)).isEmpty)
        let resume = RequestID(high: 8, low: 2)
        let resumed = schedules.commit(schedules.jobs.request(BrokerService.scheduleResume, name, resume))
        #expect(
            Harness.answer(in: resumed, to: resume)
                == withUnsafeBytes(of: Int64(1_700_000_006_000).bigEndian, Array.init))
        let ticked = schedules.at(1_700_000_006_000)
        #expect(Harness.firedTicks(in: ticked) == [1_700_000_006_000])
        _ = schedules.commit(ticked)

        let trigger = RequestID(high: 8, low: 3)
        let triggered = schedules.commit(schedules.jobs.request(BrokerService.scheduleTrigger, name, trigger))
        #expect(Harness.answer(in: triggered, to: trigger)?.count == 16, "the triggered job's id")

        let list = RequestID(high: 8, low: 4)
        let listed = schedules.jobs.request(BrokerService.scheduleList, [], list)
        let listing = try ScheduleListing(decoding: try #require(Harness.answer(in: listed, to: list)))
        #expect(listing.items.map(\.spec.name) == ["beat"])

        let remove = RequestID(high: 8, low: 5)
        _ = schedules.commit(schedules.jobs.request(BrokerService.scheduleRemove, name, remove))
        #expect(changes(in: schedules.at(1_700_000_020_000)).isEmpty)
        let unknown = RequestID(high: 8, low: 6)
        let refused = schedules.jobs.request(BrokerService.schedulePause, name, unknown)
        #expect(Harness.statuses(in: refused).contains(.invalidPayload))
        // What is not a name is said to be none, not looked up: empty, or not UTF-8.
        for (body, says) in [([UInt8](), "is not 1...255 bytes"), ([0xFF, 0x28], "is not UTF-8")] {
            let asked = schedules.jobs.request(BrokerService.scheduleTrigger, body, RequestID(high: 8, low: 7))
            let messages = asked.compactMap { action -> String? in
                guard case .answer(_, let reply) = action else { return nil }
                return RemoteErrorBody(decoding: reply.body).message
            }
            #expect(messages.count == 1 && messages[0].contains(says), "\(messages)")
        }
    }

    /// Bad schedules are refused naming the problem, and nothing is written.
    @Test func aBadScheduleIsRefusedAndNothingWritten() throws {
        var schedules = Harness()
        let request = RequestID(high: 9, low: 1)
        var bytes = Self.everySecond().encode()
        bytes[3] = 9  // timing
        let refused = schedules.jobs.request(BrokerService.scheduleSave, bytes, request)
        #expect(writes(in: refused).isEmpty)
        #expect(Harness.statuses(in: refused).contains(.invalidPayload))
        let own = ScheduleSpec(
            name: "x", timing: .every(milliseconds: 1000), job: JobSubmission(service: "mmi.jobs.list", body: []))
        let mine = schedules.jobs.request(BrokerService.scheduleSave, own.encode(), request)
        #expect(writes(in: mine).isEmpty)
        // A job of a later submission version: its fields would be dropped unsaid.
        var confirming = Self.everySecond()
        confirming.job.confirmWithinMilliseconds = 850
        let later =
            Array(Self.everySecond().encode().dropLast(Self.everySecond().job.encode().count))
            + confirming.job.encode()
        let refusedLater = schedules.jobs.request(BrokerService.scheduleSave, later, request)
        #expect(writes(in: refusedLater).isEmpty)
        #expect(
            Self.messages(in: refusedLater).contains {
                $0.contains("a job submission of version 2; a schedule's job is of version 1")
            })
        // Version 4, for a concurrency key, is taken; with a key hold it is not.
        var keyed = Self.everySecond()
        keyed.name = "keyed"
        keyed.job.concurrencyKey = "customer-42"
        keyed.job.concurrencyLimit = 1
        #expect(keyed.job.encode().first == 4)
        #expect(try ScheduleSpec(decoding: keyed.encode()) == keyed)
        var held = keyed
        held.job.idempotencyKey = "k"
        held.job.keyHold = .whileRunning
        #expect(throws: ProtocolError.self) { try ScheduleSpec(decoding: held.encode()) }
        // A name no schedule can have, named as such rather than as unknown.
        let long = schedules.jobs.request(
            BrokerService.schedulePause, Array(String(repeating: "n", count: 300).utf8), request)
        #expect(Self.messages(in: long).contains { $0.contains("(300 bytes) is not 1...255 bytes") })
    }

    static func messages(in actions: [JobScheduler.Action]) -> [String] {
        actions.compactMap { action -> String? in
            guard case .answer(_, let reply) = action, reply.status != .ok else { return nil }
            return RemoteErrorBody(decoding: Array(reply.body)).message
        }
    }

    /// A broker that stops answers a schedule call whose write is in flight at once (the
    /// client asks the broker that comes back), and not again when the write comes back.
    @Test func theShutdownAnswersAScheduleCallWaitingForItsWriteOnce() throws {
        var schedules = Harness()
        let request = RequestID(high: 10, low: 1)
        let asked = schedules.jobs.request(BrokerService.scheduleSave, Self.everySecond().encode(), request)
        var stopped: [JobScheduler.Action] = []
        schedules.jobs.scheduler.shutdown("stopping", into: &stopped)
        let statuses = { (actions: [JobScheduler.Action]) in
            actions.compactMap { action -> ReplyStatus? in
                guard case .answer(let caller, let reply) = action, caller.requestID == request else { return nil }
                return reply.status
            }
        }
        #expect(statuses(stopped) == [.brokerShuttingDown])
        let late = schedules.jobs.journal(.written(writes(in: asked)[0], .success(JournalReceipt())))
        #expect(statuses(late).isEmpty)
    }

    /// A cron schedule down for 2,000 of its ticks is walked 1,000 ticks at a time: nothing
    /// fires until the walk is through, then the one job its catch-up policy keeps.
    @Test func aLongCatchUpIsWalkedOverSeveralTicksAndFiresOnce() throws {
        var spec = ScheduleSpec(
            name: "minutely", timing: .cron(try CronExpression("* * * * *"), timeZone: "UTC"),
            job: JobSubmission(service: "sky.echo", body: [1]))
        spec.catchUp = .last
        // 1_700_000_040_000 is a whole minute; down 2,000 minutes.
        let record = ScheduleRecord(name: "minutely", spec: spec.encode(), nextFire: 1_700_000_040_000)
        let now: Int64 = 1_700_000_040_000 + 2000 * 60_000 + 30_000
        var schedules = Harness(loading: [record], at: now)
        #expect(changes(in: schedules.at(now)).isEmpty, "walked 1,000 of them")
        #expect(changes(in: schedules.at(now + 100)).isEmpty, "walked 2,000")
        let fired = schedules.at(now + 200)
        let lastTick: Int64 = 1_700_000_040_000 + 2000 * 60_000
        #expect(Harness.firedTicks(in: fired) == [lastTick])
        let submitted: [[UInt8]] = changes(in: fired).compactMap { change -> [UInt8]? in
            if case .submitted(let record) = change { record.id } else { nil }
        }
        let nextFire: Int64 = 1_700_000_040_000 + 2001 * 60_000
        let advanced: JobChange = .scheduleAdvanced(name: "minutely", nextFire: nextFire, lastJob: submitted.last)
        #expect(changes(in: fired).last == advanced)
    }

    /// A paused schedule saved again unpaused starts from now, as a resumed one does: the
    /// ticks it missed while paused do not fire.
    @Test func aPausedScheduleSavedUnpausedStartsFromNow() throws {
        var schedules = Harness()
        var spec = Self.everySecond()
        spec.overlap = .allow
        _ = schedules.save(spec)
        _ = schedules.commit(
            schedules.jobs.request(BrokerService.schedulePause, Array("beat".utf8), RequestID(high: 11, low: 1)))
        #expect(changes(in: schedules.at(1_700_000_008_500)).isEmpty)
        let saved = schedules.save(spec, RequestID(high: 11, low: 2))
        #expect(saved == withUnsafeBytes(of: Int64(1_700_000_009_000).bigEndian, Array.init))
        #expect(Harness.firedTicks(in: schedules.at(1_700_000_009_000)) == [1_700_000_009_000])
    }

    /// New schedules whose first write is in flight count toward the limit: a burst of saves
    /// cannot pass it.
    @Test func savesInFlightCountTowardTheLimit() throws {
        var schedules = Harness()
        for index in 0..<ScheduleBook.maxSchedules {
            var spec = Self.everySecond("s\(index)")
            spec.paused = true
            _ = schedules.jobs.request(
                BrokerService.scheduleSave, spec.encode(), RequestID(high: 12, low: UInt64(index)))
        }
        let over = RequestID(high: 13, low: 1)
        let refused = schedules.jobs.request(BrokerService.scheduleSave, Self.everySecond("one more").encode(), over)
        #expect(writes(in: refused).isEmpty)
        #expect(Harness.statuses(in: refused).contains(.overloaded))
    }

    /// A client cannot take a tick's idempotency key.
    @Test func aClientSubmitWithTheBrokersKeyPrefixIsRefused() throws {
        var jobs = SchedulerHarness()
        var submission = JobSubmission(service: "sky.echo", body: [1])
        submission.idempotencyKey = "sky.schedule/8d59707b575eaba/1700000001000"
        let request = RequestID(high: 14, low: 1)
        let refused = jobs.request(BrokerService.jobSubmit, submission.encode(), request)
        #expect(writes(in: refused).isEmpty)
        #expect(Harness.statuses(in: refused).contains(.invalidPayload))
    }

    /// Ticks due together (the broker's loop stalled past several): `.skip` makes one job, for
    /// the latest of them.
    @Test func skipFiresTheLatestOfTicksDueTogether() throws {
        var schedules = Harness()
        _ = schedules.save(Self.everySecond())
        #expect(Harness.firedTicks(in: schedules.at(1_700_000_004_000)) == [1_700_000_004_000])
    }
}
