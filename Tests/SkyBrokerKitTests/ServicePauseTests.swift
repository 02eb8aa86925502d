import SkyJSON
import SkyJournal
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Paused services: nothing of theirs starts, what runs finishes, their calls wait up to their
/// deadline, their jobs wait unprepared; a resume starts the backlog; the pause is on disk
/// before it is answered and is undone if it cannot be written.
@Suite("Broker state machine: paused services")
struct ServicePauseTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let admin = PeerID([0, 0, 0, 0, 2])
    let worker1 = PeerID([0, 0, 0, 1, 1])

    /// Pauses (or resumes) `service` and commits the write; returns the answer.
    func control(
        _ broker: inout BrokerHarness, _ service: String, pause: Bool, failing: JournalError? = nil
    ) -> [TaskReply] {
        let id = RequestID(high: 0xAD, low: UInt64.random(in: 1...UInt64.max))
        let asked = broker.request(
            admin, id, service: pause ? BrokerService.servicePause : BrokerService.serviceResume,
            body: Array(service.utf8))
        #expect(replies(asked, to: id).isEmpty == broker.machine.configuration.journal, "answered once on disk")
        return replies(asked + broker.commit(asked, failing: failing), to: id)
    }

    @Test func aPausedServiceStartsNothingWhileOthersRunAndAResumeStartsItsBacklog() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 4, services: ["a", "b"])
        #expect(control(&broker, "a", pause: true).map(\.status) == [.ok])
        let callA = RequestID(high: 1, low: 1)
        let callB = RequestID(high: 1, low: 2)
        #expect(dispatched(broker.request(client, callA, service: "a", timeout: .seconds(10))).isEmpty)
        #expect(dispatched(broker.request(client, callB, service: "b")).map(\.1) == [callB], "others run")
        let (job, _) = broker.submit(client, RequestID(high: 2, low: 1), service: "a")
        #expect(broker.machine.jobBook.jobs[job]?.attempt == 0, "no start written for a paused service's job")
        // Five seconds on, nothing of it has started.
        var later: [BrokerAction] = []
        for _ in 0..<5 {
            later += broker.worker(worker1, .heartbeat)
            later += broker.advance(.seconds(1))
        }
        #expect(dispatched(later).isEmpty && journalWrites(later).isEmpty)
        let listing = try? CanonicalJSON.decode(
            ServiceListing.self,
            from: replies(
                broker.request(admin, RequestID(high: 3, low: 3), service: BrokerService.serviceList, body: []),
                to: RequestID(high: 3, low: 3)
            ).first?.body ?? [])
        #expect(
            listing?.services.first { $0.name == "a" }
                == ServiceState(name: "a", workers: 1, queued: 1, jobsQueued: 1, paused: true))

        let resumed = broker.request(
            admin, RequestID(high: 4, low: 4), service: BrokerService.serviceResume, body: Array("a".utf8))
        #expect(dispatched(resumed).isEmpty, "nothing starts before the resume is on disk")
        let written = broker.commit(resumed)
        #expect(dispatched(written).map(\.1) == [callA], "the waiting call first, once the resume is written")
        #expect(broker.settle(written) == [callA, job.requestID], "then the job, once its start is on disk")
    }

    /// `broker.stats` says which services are paused, those with work waiting and those paused
    /// ahead of any: skywatch showed a paused service's queue growing with workers idle and
    /// nothing saying why.
    @Test func statsSayWhichServicesArePaused() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 4, services: ["a", "b"])
        _ = broker.advance(.milliseconds(10))  // starts the stats clock
        _ = control(&broker, "a", pause: true)
        _ = control(&broker, "later", pause: true)
        _ = broker.request(client, RequestID(high: 1, low: 1), service: "a", timeout: .seconds(10))
        let stats = events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats
        #expect(stats?.services?["a"]?.paused == true && stats?.services?["a"]?.queued == 1)
        #expect(stats?.services?["later"]?.paused == true && stats?.services?["later"]?.queued == 0)
        #expect(stats?.services?["b"] != nil && stats?.services?["b"]?.paused == nil, "absent when not paused")
        _ = control(&broker, "later", pause: false)
        let after = events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats
        #expect(after?.services?["later"] == nil, "a resumed service with nothing of it is not listed")
    }

    /// A resume that cannot be written leaves the service paused and starts nothing of it: not
    /// its waiting calls, not its jobs (taken at once and undone, it ran jobs of a service that
    /// stayed paused).
    @Test func aResumeThatCannotBeWrittenStartsNothing() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 4, services: ["a"])
        _ = control(&broker, "a", pause: true)
        let call = RequestID(high: 1, low: 1)
        _ = broker.request(client, call, service: "a", timeout: .seconds(10))
        let (job, _) = broker.submit(client, RequestID(high: 2, low: 1), service: "a")
        let error = JournalError.cannotConnect(store: "/var/lib/sky/jobs.sqlite", reason: "the disk is full")
        let id = RequestID(high: 3, low: 3)
        let asked = broker.request(admin, id, service: BrokerService.serviceResume, body: Array("a".utf8))
        let followed = broker.commit(asked, failing: error)
        let answer = try #require(replies(asked + followed, to: id).first)
        #expect(answer.status == .journalUnavailable)
        #expect(RemoteErrorBody(decoding: answer.body).message.contains("stays paused"))
        #expect(broker.machine.isPaused("a"))
        #expect(dispatched(asked + followed).isEmpty && journalWrites(followed).isEmpty, "\(followed)")
        #expect(broker.machine.jobBook.jobs[job]?.attempt == 0, "no start written")
        // A resume that is written later starts them.
        #expect(control(&broker, "a", pause: false).map(\.status) == [.ok])
        #expect(!broker.machine.isPaused("a"))
    }

    /// A pause that comes while a resume is being written wins: the resume, written, starts
    /// nothing.
    @Test func aPauseWhileAResumeIsWrittenKeepsTheServicePaused() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 4, services: ["a"])
        _ = control(&broker, "a", pause: true)
        let call = RequestID(high: 1, low: 1)
        _ = broker.request(client, call, service: "a", timeout: .seconds(10))
        let resume = broker.request(
            admin, RequestID(high: 3, low: 3), service: BrokerService.serviceResume, body: Array("a".utf8))
        let pause = broker.request(
            admin, RequestID(high: 4, low: 4), service: BrokerService.servicePause, body: Array("a".utf8))
        let written = broker.commit(resume) + broker.commit(pause)
        #expect(dispatched(written).isEmpty)
        #expect(broker.machine.isPaused("a"))
    }

    @Test func aCallOfAPausedServiceIsAnsweredAtItsDeadlineSayingWhy() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, services: ["a"])
        _ = control(&broker, "a", pause: true)
        let call = RequestID(high: 1, low: 1)
        _ = broker.request(client, call, service: "a", timeout: .milliseconds(500))
        let answer = try #require(replies(broker.advance(.milliseconds(600)), to: call).first)
        #expect(answer.status == .deadlineExceeded)
        #expect(RemoteErrorBody(decoding: answer.body).message.contains("the service a is paused"))
    }

    @Test func whatRunsWhenAServiceIsPausedFinishes() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, services: ["a"])
        let call = RequestID(high: 1, low: 1)
        #expect(dispatched(broker.request(client, call, service: "a")).map(\.1) == [call])
        _ = control(&broker, "a", pause: true)
        #expect(replies(broker.reply(worker1, client: client, call), to: call).map(\.status) == [.ok])
    }

    @Test func aPauseThatCannotBeWrittenIsUndoneAndSaysWhy() throws {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, services: ["a"])
        let error = JournalError.cannotConnect(store: "postgresql://sky@db/sky", reason: "the server did not answer")
        let id = RequestID(high: 0xAD, low: 1)
        let asked = broker.request(admin, id, service: BrokerService.servicePause, body: Array("a".utf8))
        let followed = broker.commit(asked, failing: error)
        let answer = try #require(replies(followed, to: id).first)
        // The log says the undo, not an operator's resume ("service resumed" came after "paused").
        #expect(logs(asked + followed) == ["service paused", "the pause of a could not be recorded, so it was undone"])
        #expect(answer.status == .journalUnavailable)
        #expect(RemoteErrorBody(decoding: answer.body).message.contains("undone"))
        #expect(!broker.machine.isPaused("a"))
        let call = RequestID(high: 1, low: 1)
        #expect(dispatched(broker.request(client, call, service: "a")).map(\.1) == [call])
    }

    @Test func servicesPausedAtStartStartNoneOfTheirUnfinishedJobs() {
        var broker = BrokerHarness.withJournal()
        broker.machine.pausedAtStart(["a"])
        let record = JobRecord(
            id: JobID(bytes: [UInt8](repeating: 9, count: 16))!.bytes, service: "a", body: [1], state: .queued,
            expiresAt: 0, options: JobSubmission(service: "a", body: []).encode())
        var actions: [BrokerAction] = []
        broker.machine.recover([record], now: broker.now, into: &actions)
        actions += broker.ready(worker1, services: ["a"])
        #expect(!journalWrites(actions).contains { if case .started = $0 { true } else { false } }, "\(actions)")
        #expect(dispatched(actions).isEmpty)
        #expect(control(&broker, "a", pause: false).map(\.status) == [.ok])
        #expect(broker.machine.jobBook.jobs.values.first?.attempt == 1, "prepared once resumed")
    }

    /// Starts prepared ahead of the credits (a submit's first start among them) are taken back
    /// when the service is paused, on disk too: a broker killed while it is paused counts no
    /// attempt for a job that did not run.
    @Test func pausingTakesBackThePreparedStarts() {
        var broker = BrokerHarness.withJournal()
        _ = broker.ready(worker1, capacity: 1, services: ["a"])
        let running = RequestID(high: 1, low: 1)
        _ = broker.request(client, running, service: "a", timeout: .seconds(30))
        var jobs: [JobID] = []
        for index in 0..<3 {
            jobs.append(broker.submit(client, RequestID(high: 2, low: UInt64(index)), service: "a").0)
        }
        #expect(jobs.allSatisfy { broker.machine.jobBook.jobs[$0]?.attempt == 1 }, "prepared, their starts on disk")
        let id = RequestID(high: 0xAD, low: 1)
        let asked = broker.request(admin, id, service: BrokerService.servicePause, body: Array("a".utf8))
        let released = writesWithNextCommit(asked)
        #expect(released.count == 3 && jobs.allSatisfy { released.contains(.released($0)) }, "\(asked)")
        #expect(jobs.allSatisfy { broker.machine.jobBook.jobs[$0]?.attempt == 0 })
        #expect(replies(broker.commit(asked), to: id).map(\.body) == [[1]], "it changed something")
        // The running call finishes; nothing of the service goes to its credit.
        #expect(dispatched(broker.reply(worker1, client: client, running)).isEmpty)
        #expect(control(&broker, "a", pause: true).map(\.body) == [[0]], "paused already")
    }

    @Test func aNameThatIsNotUTF8AndPausesBeyondTheLimitAreRefused() {
        var broker = BrokerHarness()
        let id = RequestID(high: 7, low: 8)
        let asked = broker.request(admin, id, service: BrokerService.servicePause, body: [0x61, 0xC3])
        #expect(replies(asked, to: id).map(\.status) == [.invalidPayload])
        #expect(!broker.machine.isPaused("a\u{FFFD}"))
        for index in 0..<BrokerStateMachine.maxPausedServices {
            _ = broker.request(admin, id, service: BrokerService.servicePause, body: Array("s\(index)".utf8))
        }
        let over = broker.request(admin, id, service: BrokerService.servicePause, body: Array("one.more".utf8))
        #expect(replies(over, to: id).map(\.status) == [.overloaded])
        #expect(
            replies(broker.request(admin, id, service: BrokerService.servicePause, body: Array("s1".utf8)), to: id).map(
                \.status) == [.ok], "one paused already is not a new one")
    }

    @Test func badNamesAreRefusedAndABrokerWithoutAJournalPausesInMemory() {
        var broker = BrokerHarness.withJournal()
        for (name, status) in [("mmi.workers", ReplyStatus.invalidPayload), ("", .invalidPayload)] {
            let id = RequestID(high: 7, low: 7)
            let asked = broker.request(admin, id, service: BrokerService.servicePause, body: Array(name.utf8))
            #expect(replies(asked, to: id).map(\.status) == [status], "\(name)")
            #expect(journalWrites(asked).isEmpty)
        }
        var memory = BrokerHarness()
        #expect(control(&memory, "a", pause: true).map(\.status) == [.ok])
        #expect(memory.machine.isPaused("a"))
    }
}
