import SkyJournal
import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// Drives a ``JobScheduler`` alone: its inputs by hand, its time (the broker's nanoseconds)
/// moved by hand, its actions read back. `BrokerJobTests` runs it with workers and sockets.
struct SchedulerHarness {
    var scheduler: JobScheduler
    var now: Int64 = 0
    let client = PeerID([0, 0, 0, 0, 1])
    static let wall: Int64 = 1_700_000_000_000
    static let service = "sky.scan"

    init(_ change: (inout BrokerRouting) -> Void = { _ in }) {
        var routing = BrokerRouting()
        routing.journal = true
        routing.wallClock = { Self.wall }
        change(&routing)
        scheduler = JobScheduler(configuration: JobScheduler.Configuration(routing), seed: 1)
    }

    func caller(_ request: RequestID) -> JobCaller { JobCaller(peer: client, requestID: request, attempt: 1) }

    mutating func request(_ service: String, _ body: [UInt8], _ request: RequestID) -> [JobScheduler.Action] {
        var actions: [JobScheduler.Action] = []
        let handled = scheduler.request(
            TaskRequest(requestID: request, service: service, body: body), from: caller(request), now: now,
            into: &actions)
        #expect(handled)
        return actions
    }

    mutating func ask(_ service: String, _ id: JobID, _ request: RequestID) -> [JobScheduler.Action] {
        self.request(service, id.bytes, request)
    }

    mutating func journal(_ answer: JournalAnswer) -> [JobScheduler.Action] {
        var actions: [JobScheduler.Action] = []
        scheduler.journalAnswered(answer, now: now, into: &actions)
        return actions
    }

    /// Answers every journal write among `actions` as durable, in order; returns what followed.
    mutating func commit(_ actions: [JobScheduler.Action]) -> [JobScheduler.Action] {
        writes(in: actions).flatMap { journal(.written($0, .success(JournalReceipt()))) }
    }

    /// Submits a job and commits it; returns its id and what followed.
    mutating func submit(
        _ request: RequestID, priority: Int8 = 0, change: (inout JobSubmission) -> Void = { _ in }
    ) -> (JobID, [JobScheduler.Action]) {
        var submission = JobSubmission(service: Self.service, body: [7])
        submission.priority = priority
        change(&submission)
        let followed = commit(self.request(BrokerService.jobSubmit, submission.encode(), request))
        let id = followed.lazy.compactMap { action -> JobID? in
            guard case .answer(let caller, let reply) = action, caller.requestID == request else { return nil }
            return JobID(bytes: reply.body)
        }.first
        return (id!, followed)
    }

    mutating func joined(capacity: Int) -> [JobScheduler.Action] {
        var actions: [JobScheduler.Action] = []
        scheduler.workerJoined(serving: [Self.service], capacity: capacity, into: &actions)
        return actions
    }

    /// Takes the best prepared job and says it went out as delivery `tag`.
    mutating func dispatch(tag: UInt64, worker: String = "w1") -> Delivery? {
        var actions: [JobScheduler.Action] = []
        return dispatch(tag: tag, worker: worker, into: &actions)
    }

    /// The same, keeping what the scheduler did about it.
    mutating func dispatch(tag: UInt64, worker: String = "w1", into actions: inout [JobScheduler.Action]) -> Delivery? {
        guard let service = scheduler.best(among: [Self.service]), let delivery = scheduler.take(service) else {
            return nil
        }
        scheduler.dispatched(delivery.id, tag: tag, worker: worker, into: &actions)
        return delivery
    }

    typealias Delivery = JobScheduler.Delivery

    mutating func ended(_ reply: TaskReply) -> [JobScheduler.Action] {
        var actions: [JobScheduler.Action] = []
        scheduler.attemptEnded(reply, now: now, into: &actions)
        return actions
    }

    mutating func tick() -> [JobScheduler.Action] {
        var actions: [JobScheduler.Action] = []
        var budget = WorkBudget(
            count: 100, until: MonotonicInstant(nanoseconds: .max), clock: { MonotonicInstant(nanoseconds: 0) })
        scheduler.tick(now: now, budget: &budget, into: &actions)
        return actions
    }
}

/// The journal writes among `actions`, in a commit of their own or with the next.
func writes(in actions: [JobScheduler.Action]) -> [JournalWrite] {
    actions.compactMap { action in
        switch action {
        case .journal(.write(_, let purpose)), .journal(.writeWithNextCommit(_, let purpose)): purpose
        default: nil
        }
    }
}

/// The changes written among `actions`.
func changes(in actions: [JobScheduler.Action]) -> [JobChange] {
    actions.flatMap { action -> [JobChange] in
        switch action {
        case .journal(.write(let changes, _)), .journal(.writeWithNextCommit(let changes, _)): changes
        default: []
        }
    }
}
