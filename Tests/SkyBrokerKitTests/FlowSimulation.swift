import Foundation
import SkyJournal
import SkyWire
import SkyZMQ

@testable import SkyBrokerKit
@testable import SkyProtocol

/// A broker's job scheduler run whole by hand: its journal a real SQLite file whose work is
/// done as soon as it is asked (in order), one worker running a handler a service, and a
/// broker that can be killed between any two of its steps (``kill()``): what the journal had
/// not done is lost, and a new scheduler takes up what the file holds, as a restarted
/// `skybroker` does.
struct FlowSimulation {
    typealias Handler = @Sendable (_ body: [UInt8]) -> (ReplyStatus, [UInt8])

    let path: String
    let store: SQLiteJobStore
    var scheduler: JobScheduler
    let handlers: [String: Handler]
    let capacity: Int
    /// What the scheduler asked, not yet done.
    var queue: [JobScheduler.Action] = []
    var running: [(id: JobID, request: TaskRequest, tag: UInt64)] = []
    var nextTag: UInt64 = 1
    /// Executions of each step (by its key), across kills.
    var executions: [String: Int] = [:]
    /// Answers to callers, by request.
    var answers: [RequestID: [TaskReply]] = [:]
    /// Events published, in order.
    var events: [(kind: EventKind, event: JobScheduler.JobEvent)] = []
    var seed: UInt64 = 1
    let client = PeerID([0, 0, 0, 0, 1])
    static let wall: Int64 = 1_700_000_000_000

    let maxFrameSize: Int64

    init(capacity: Int = 4, handlers: [String: Handler], maxFrameSize: Int64 = 16 << 20) throws {
        self.maxFrameSize = maxFrameSize
        path = NSTemporaryDirectory() + "sky-flow-\(UUID().uuidString).sqlite"
        store = try SQLiteJobStore(path: path)
        self.handlers = handlers
        self.capacity = capacity
        scheduler = Self.scheduler(seed: 1, maxFrameSize: maxFrameSize)
        scheduler.workerJoined(serving: Array(handlers.keys), capacity: capacity, into: &queue)
        var loaded: [JobScheduler.Action] = []
        scheduler.journalAnswered(.schedulesLoaded(.success([])), now: 0, into: &loaded)
    }

    static func scheduler(seed: UInt64, maxFrameSize: Int64) -> JobScheduler {
        var routing = BrokerRouting()
        routing.maxFrameSize = maxFrameSize
        routing.journal = true
        routing.wallClock = { Self.wall }
        return JobScheduler(configuration: JobScheduler.Configuration(routing), seed: seed)
    }

    func remove() {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    func caller(_ request: RequestID) -> JobCaller { JobCaller(peer: client, requestID: request, attempt: 1) }

    /// Sends a request to the scheduler; its answers land in ``answers``.
    mutating func request(_ service: String, _ body: [UInt8], _ request: RequestID) {
        var actions: [JobScheduler.Action] = []
        _ = scheduler.request(
            TaskRequest(requestID: request, service: service, body: body), from: caller(request), now: 0,
            into: &actions)
        queue += actions
    }

    /// Does one thing: the oldest action asked for, or else a running step's end. `false` when
    /// nothing is left.
    mutating func step() throws -> Bool {
        if !queue.isEmpty {
            try perform(queue.removeFirst())
            return true
        }
        guard !running.isEmpty else { return false }
        let delivery = running.removeFirst()
        let key = scheduler.book.jobs[delivery.id]?.submission.idempotencyKey ?? "?"
        executions[key, default: 0] += 1
        let (status, body) =
            handlers[delivery.request.service]?(delivery.request.body) ?? (.unknownService, [])
        var actions: [JobScheduler.Action] = []
        scheduler.attemptEnded(
            TaskReply(requestID: delivery.request.requestID, attempt: 1, status: status, body: body), now: 0,
            into: &actions)
        queue += actions
        offer()
        return true
    }

    /// Runs the scheduler's work until only workers' work is left, then ends the running step
    /// of `service` first (the others keep running).
    mutating func end(_ service: String) throws {
        while !queue.isEmpty { _ = try step() }
        guard let index = running.firstIndex(where: { $0.request.service == service }) else { return }
        running.insert(running.remove(at: index), at: 0)
        _ = try step()
    }

    /// The broker's tick (its flows' later slices among what it does).
    mutating func tick() {
        var actions: [JobScheduler.Action] = []
        var budget = WorkBudget(
            count: 100, until: MonotonicInstant(nanoseconds: .max), clock: { MonotonicInstant(nanoseconds: 0) })
        scheduler.tick(now: 0, budget: &budget, into: &actions)
        queue += actions
    }

    /// Runs until nothing is left, or `limit` steps.
    mutating func run(limit: Int = 1_000_000) throws {
        var steps = 0
        while steps < limit, try step() { steps += 1 }
    }

    /// The broker dies: what it asked and its workers' work are lost; a new one takes up the file.
    mutating func kill() {
        queue.removeAll()
        running.removeAll()
        seed += 1
        scheduler = Self.scheduler(seed: seed, maxFrameSize: maxFrameSize)
        var actions: [JobScheduler.Action] = []
        scheduler.workerJoined(serving: Array(handlers.keys), capacity: capacity, into: &actions)
        _ = scheduler.recover((try? store.unfinished()) ?? [], now: 0, into: &actions)
        queue += actions
    }

    private mutating func perform(_ action: JobScheduler.Action) throws {
        var actions: [JobScheduler.Action] = []
        switch action {
        case .answer(let caller, let reply):
            answers[caller.requestID, default: []].append(reply)
        case .journal(.write(let changes, let purpose)), .journal(.writeWithNextCommit(let changes, let purpose)):
            let result = Result { () throws(JournalError) in try store.apply(changes) }
            scheduler.journalAnswered(.written(purpose, result), now: 0, into: &actions)
        case .journal(.loadFlow(let id, let keys)):
            let result = Result { () throws(JournalError) in try store.jobs(idempotencyKeys: keys) }
            scheduler.journalAnswered(.flowLoaded(id, result), now: 0, into: &actions)
        case .journal(.readFlow(let id, let caller)):
            let result = Result { () throws(JournalError) -> FlowRead in
                let record = try store.job(id.bytes)
                guard let record, let spec = try? FlowSpec(decoding: record.body) else {
                    return JobScheduler.readFlow(id, record: record, steps: [])
                }
                let steps = try store.jobs(idempotencyKeys: JobScheduler.stepKeys(id, spec))
                return JobScheduler.readFlow(id, record: record, steps: steps)
            }
            scheduler.journalAnswered(.flowRead(id, caller, result), now: 0, into: &actions)
        case .journal(.lookup(let id, let caller, let retry)):
            let result = Result { () throws(JournalError) in try store.job(id.bytes) }
            scheduler.journalAnswered(.lookedUp(id, caller, retry: retry, result), now: 0, into: &actions)
        case .journal(.select(let selection, let errorType, let caller)):
            let result = Result { () throws(JournalError) in
                try BulkSelection.select(selection, errorType: errorType, from: store)
            }
            scheduler.journalAnswered(.selected(caller, result), now: 0, into: &actions)
        case .journal(.read(let ids)):
            let result = Result { () throws(JournalError) in try BulkRead.read(ids, from: store) }
            scheduler.journalAnswered(.read(result), now: 0, into: &actions)
        case .journal(.loadSchedules):
            scheduler.journalAnswered(.schedulesLoaded(.success([])), now: 0, into: &actions)
        case .publish(let kind, let event):
            events.append((kind, event))
        case .offer:
            offer()
        case .cancelAttempt(let id, _):
            running.removeAll { $0.id == id }
        default:
            break
        }
        queue += actions
    }

    private mutating func offer() {
        while running.count < capacity, let service = scheduler.best(among: Array(handlers.keys)),
            let delivery = scheduler.take(service)
        {
            var actions: [JobScheduler.Action] = []
            scheduler.dispatched(delivery.id, tag: nextTag, worker: "w1", into: &actions)
            running.append((delivery.id, delivery.request, nextTag))
            nextTag += 1
            queue += actions
        }
    }

    /// The one answer to `request`: its body, or its failure.
    func answer(_ request: RequestID) -> TaskReply? {
        answers[request]?.last
    }

    /// The flow's record in the file.
    func record(_ id: JobID) throws -> JobRecord? { try store.job(id.bytes) }
}

/// Services for flows' tests: numbers and arrays of them as JSON.
enum FlowServices {
    static func number(_ body: [UInt8]) -> Int { Int(String(decoding: body, as: UTF8.self)) ?? -1 }

    static let handlers: [String: FlowSimulation.Handler] = [
        "double": { body in (.ok, Array("\(number(body) * 2)".utf8)) },
        "inc": { body in (.ok, Array("\(number(body) + 1)".utf8)) },
        "sum": { body in
            let values = (try? JSONDecoder().decode([Int].self, from: Data(body))) ?? []
            return (.ok, Array("\(values.reduce(0, +))".utf8))
        },
        "fail": { _ in (.handlerError, RemoteErrorBody(type: "Broken", message: "it broke").encoded()) },
        "binary": { _ in (.ok, [0xFF, 0x00]) },
    ]

    static func step(_ service: String, _ body: String = "") -> FlowSpec.Node {
        .step(JobSubmission(service: service, body: Array(body.utf8)))
    }
}
