import Foundation
import SkyJSON

/// The name of an event, also its PUB/SUB topic. Open-ended so that a watcher built against an
/// older version still decodes events it does not know.
public struct EventKind: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A worker registered (READY).
    public static let workerConnected = EventKind(rawValue: "worker.connected")
    /// A worker left or was removed; ``SkyEvent/reason`` says why.
    public static let workerDisconnected = EventKind(rawValue: "worker.disconnected")
    /// Sent whenever a subscriber joins: the current workers, so a new watcher starts from the
    /// present state and knows its subscription is live.
    public static let brokerHello = EventKind(rawValue: "broker.hello")
    /// A broker became the active one on a shared job store (``SkyEvent/epoch`` names its turn):
    /// sent once a run, just before the first `broker.stats` that a subscriber takes (later
    /// subscribers see the epoch in `broker.hello` and the snapshot).
    public static let brokerActive = EventKind(rawValue: "broker.active")
    /// A worker is stopping: it gets no new tasks and finishes the ones it holds.
    public static let workerDraining = EventKind(rawValue: "worker.draining")
    /// Every second: counts of workers, queued and in-flight tasks, and throughput.
    public static let brokerStats = EventKind(rawValue: "broker.stats")
    /// A task went back to the queue because the worker holding it was lost.
    public static let taskRedispatched = EventKind(rawValue: "task.redispatched")
    /// The broker answered a task with a failure it made itself (worker lost too often,
    /// deadline passed, no workers, overloaded, shutting down).
    public static let taskFailed = EventKind(rawValue: "task.failed")
    /// A task was handed to a worker (only with per-task events enabled).
    public static let taskDispatched = EventKind(rawValue: "task.dispatched")
    /// A worker's reply was forwarded to the client (only with per-task events enabled).
    public static let taskCompleted = EventKind(rawValue: "task.completed")
    /// A durable job was recorded (its ``TaskInfo/requestID`` is the job id's 26 characters).
    public static let jobSubmitted = EventKind(rawValue: "job.submitted")
    /// A job's success is recorded.
    public static let jobSucceeded = EventKind(rawValue: "job.succeeded")
    /// A job's failure is recorded (its last attempt failed, or it may not be retried).
    public static let jobFailed = EventKind(rawValue: "job.failed")
    /// A job's cancellation is recorded.
    public static let jobCancelled = EventKind(rawValue: "job.cancelled")
    /// An attempt of a job failed and another is scheduled after a backoff.
    public static let jobRetrying = EventKind(rawValue: "job.retrying")
    /// A running job's handler said how far it is, or logged (at most one a second per job;
    /// ``TaskInfo/progress`` and ``TaskInfo/message`` say where it stands).
    public static let jobProgress = EventKind(rawValue: "job.progress")
    /// A schedule's tick made its job, now on disk (``SkyEvent/schedule`` names the schedule and
    /// the tick, ``SkyEvent/task`` the job); also a trigger's job, without a tick.
    public static let scheduleFired = EventKind(rawValue: "schedule.fired")

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }
}

/// A worker as the broker sees it.
public struct WorkerInfo: Codable, Sendable, Equatable {
    /// The worker's routing id at the broker, in hex: unique while it is connected.
    public var id: String
    public var name: String
    public var capacity: Int
    public var services: [String]
    /// Tasks outstanding at the worker (in snapshots and stats).
    public var inFlight: Int?
    /// The IP address the broker sees the worker connect from (TCP only).
    public var host: String?
    /// Replies the worker sent for tasks it held, since it registered (in snapshots and stats).
    public var completed: UInt64?
    /// Of those, replies that were not a success: the handler threw, the task was cancelled,
    /// and so on (in snapshots and stats; absent from brokers before it was added).
    public var failed: UInt64?
    /// Milliseconds since the broker last heard from the worker (in snapshots and stats).
    public var lastHeardMilliseconds: Int?

    public init(
        id: String, name: String, capacity: Int, services: [String], inFlight: Int? = nil, host: String? = nil,
        completed: UInt64? = nil, lastHeardMilliseconds: Int? = nil
    ) {
        self.id = id
        self.name = name
        self.capacity = capacity
        self.services = services
        self.inFlight = inFlight
        self.host = host
        self.completed = completed
        self.lastHeardMilliseconds = lastHeardMilliseconds
    }
}

/// Why a worker left.
public enum DisconnectReason: String, Codable, Sendable {
    /// It said DISCONNECT.
    case graceful
    /// The broker could not route to it any more (its connection is gone).
    case unreachable
    /// It broke the protocol (for example a second READY) and was dropped.
    case protocolError
    /// It stopped sending heartbeats (crashed, frozen, or cut off) for liveness × interval.
    case expired
}

/// A task, as task events describe it.
public struct TaskInfo: Codable, Sendable, Equatable {
    /// The request id, hex.
    public var requestID: String
    public var service: String
    /// How many times the broker has handed it to a worker so far.
    public var deliveries: Int
    /// The worker involved (id, hex), when there is one.
    public var worker: String?
    /// For `task.failed` and `task.completed`: the reply status.
    public var status: String?
    /// For `job.progress`: how far its handler is (0 to 1) and what it does, as it last said.
    public var progress: Double?
    public var message: String?

    public init(
        requestID: String, service: String, deliveries: Int, worker: String? = nil, status: String? = nil,
        progress: Double? = nil, message: String? = nil
    ) {
        self.requestID = requestID
        self.service = service
        self.deliveries = deliveries
        self.worker = worker
        self.status = status
        self.progress = progress
        self.message = message
    }
}

/// The broker's load, as `broker.stats` reports it.
public struct BrokerStats: Codable, Sendable, Equatable {
    public var workers: Int
    /// Credits over all workers.
    public var capacity: Int
    public var queued: Int
    public var inFlight: Int
    /// Tasks workers finished (replied to) since the broker started, failures included; not
    /// the broker's own answers (`mmi.*`, refusals, expiries).
    public var completed: UInt64
    /// Tasks workers finished in the last stats period, per second.
    public var completedPerSecond: Double
    /// Of ``completed``, the replies that were not a success (absent from older brokers).
    public var failed: UInt64?
    /// Bytes of request bodies waiting in the queue.
    public var queuedBytes: Int?
    /// The broker's longest event-loop iteration in the last stats period, in milliseconds:
    /// how long its heartbeats and traffic could have waited (it should stay far below the
    /// heartbeat interval).
    public var longestIterationMilliseconds: Double?
    /// Durable jobs, with a journal (absent without one, and from older brokers).
    public var jobs: JobCounts?
    /// Per service served, waiting or with work in the period: its queue, rate, failures and latency
    /// (at most ``ServiceStats/maxServices``, the busiest).
    public var services: [String: ServiceStats]?
    /// The period's first failures, at most ``TaskFailure/maxPerPeriod`` (absent when there
    /// were none, and from older brokers).
    public var failures: [TaskFailure]?
    /// The services' rate limits and what they did, by name, at most ``maxLimits`` (absent
    /// when there are none, and from older brokers).
    public var limits: [RateLimitState]?
    /// The broker's counters, as `mmi.workers` has them (absent from older brokers): a watcher
    /// sees dropped and refused input grow without asking for a snapshot.
    public var counters: BrokerCounters?

    /// Rate limits a `broker.stats` carries at most; `mmi.limits.list` has them all.
    public static let maxLimits = 1000

    public init(
        workers: Int, capacity: Int, queued: Int, inFlight: Int, completed: UInt64, completedPerSecond: Double,
        queuedBytes: Int? = nil, longestIterationMilliseconds: Double? = nil, failed: UInt64? = nil,
        jobs: JobCounts? = nil
    ) {
        self.jobs = jobs
        self.failed = failed
        self.queuedBytes = queuedBytes
        self.longestIterationMilliseconds = longestIterationMilliseconds
        self.workers = workers
        self.capacity = capacity
        self.queued = queued
        self.inFlight = inFlight
        self.completed = completed
        self.completedPerSecond = completedPerSecond
    }
}

/// One event on the broker's event socket.
///
/// On the wire: `[topic][SKYE01][seq: 8 bytes big-endian][JSON]`, where topic is the event
/// kind (so subscribers can filter by prefix) and the JSON is this structure.
public struct SkyEvent: Codable, Sendable, Equatable {
    /// Strictly increasing per broker run, starting at 1.
    public var seq: UInt64
    public var event: EventKind
    /// When the broker published it, ISO 8601 UTC with milliseconds.
    public var time: String
    public var worker: WorkerInfo?
    public var reason: DisconnectReason?
    /// For `worker.disconnected`: tasks the worker held, which went back to the queue.
    public var tasksHeld: Int?
    /// For `broker.hello`: every connected worker.
    public var workers: [WorkerInfo]?
    /// For `broker.hello`: requests waiting for a worker.
    public var queued: Int?
    /// For task events.
    public var task: TaskInfo?
    /// For `broker.stats`.
    public var stats: BrokerStats?
    /// For `broker.hello`: names this run of the broker (as ``ClusterSnapshot/broker``), so a
    /// subscriber can tell a restarted broker, whose event numbers start again at 1.
    public var broker: String?
    /// For `broker.active` and `broker.hello` from a broker on a shared job store: its turn at
    /// the store, higher for each broker that took it.
    public var epoch: Int64?
    /// For `schedule.fired`: which schedule, and which tick.
    public var schedule: ScheduleTick?

    public init(
        seq: UInt64, event: EventKind, time: String, worker: WorkerInfo? = nil, reason: DisconnectReason? = nil,
        tasksHeld: Int? = nil, workers: [WorkerInfo]? = nil, queued: Int? = nil, task: TaskInfo? = nil,
        stats: BrokerStats? = nil, broker: String? = nil, epoch: Int64? = nil, schedule: ScheduleTick? = nil
    ) {
        self.schedule = schedule
        self.broker = broker
        self.epoch = epoch
        self.seq = seq
        self.event = event
        self.time = time
        self.worker = worker
        self.reason = reason
        self.tasksHeld = tasksHeld
        self.workers = workers
        self.queued = queued
        self.task = task
        self.stats = stats
    }

    /// One line of JSON with keys in a stable order.
    public func jsonLine() -> String {
        CanonicalJSON.line(self)
    }

    public func encodeFrames() -> [[UInt8]] {
        [Array(event.rawValue.utf8), WireFormat.eventSignature, WireFormat.bytes(seq), jsonBytes()]
    }

    /// The JSON body. Task events (the ones published per request, by the thousand in a deadline
    /// storm) are written directly, with the same text `CanonicalJSON` gives; the rest go
    /// through it.
    func jsonBytes() -> [UInt8] {
        guard let task, task.progress == nil, task.message == nil, worker == nil, reason == nil, tasksHeld == nil,
            workers == nil, queued == nil, stats == nil,
            broker == nil, epoch == nil, schedule == nil
        else { return Array(jsonLine().utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(192)
        bytes.append(UInt8(ascii: "{"))
        JSONText.appendMember("event", event.rawValue, first: true, to: &bytes)
        JSONText.appendKey("seq", to: &bytes)
        JSONText.appendInteger(seq, to: &bytes)
        JSONText.appendKey("task", to: &bytes)
        bytes.append(UInt8(ascii: "{"))
        JSONText.appendKey("deliveries", first: true, to: &bytes)
        JSONText.appendInteger(task.deliveries, to: &bytes)
        JSONText.appendMember("requestID", task.requestID, to: &bytes)
        JSONText.appendMember("service", task.service, to: &bytes)
        if let status = task.status { JSONText.appendMember("status", status, to: &bytes) }
        if let worker = task.worker { JSONText.appendMember("worker", worker, to: &bytes) }
        bytes.append(UInt8(ascii: "}"))
        JSONText.appendMember("time", time, to: &bytes)
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    public static func decode(_ frames: [[UInt8]]) throws(ProtocolError) -> SkyEvent {
        guard !frames.isEmpty else { throw .empty }
        guard frames.count == 4 else {
            throw .wrongFrameCount(command: "EVENT", expected: "4", actual: frames.count)
        }
        guard frames[1] == WireFormat.eventSignature else { throw .unknownSignature(frames[1]) }
        let seq = try WireFormat.uint64(frames[2], name: "seq")
        let event: SkyEvent
        do {
            event = try CanonicalJSON.decode(SkyEvent.self, from: frames[3])
        } catch {
            throw .invalidValue(name: "event body", reason: "not an event JSON object")
        }
        guard event.seq == seq, Array(event.event.rawValue.utf8) == frames[0] else {
            throw .invalidValue(name: "event", reason: "topic or seq differ between frames and body")
        }
        return event
    }

    /// The current time in the format of ``time``: `2026-11-22T04:14:27.595Z`.
    /// Costs no formatter: the broker stamps every event it publishes.
    public static func timestamp(_ date: Date = Date()) -> String {
        JSONText.timestamp(millisecondsSince1970: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }
}

/// A schedule's tick, as `schedule.fired` names it.
public struct ScheduleTick: Codable, Sendable, Equatable {
    /// The schedule's name.
    public var name: String
    /// The tick's time, ISO 8601 UTC with milliseconds; absent for a job made by a trigger.
    public var tick: String?

    public init(name: String, tick: String?) {
        self.name = name
        self.tick = tick
    }
}

/// Durable jobs at the broker: how many it holds unfinished now, and what happened to jobs since
/// it started (submits recorded, outcomes recorded, retries scheduled).
public struct JobCounts: Codable, Sendable, Equatable {
    /// Unfinished jobs now (queued, scheduled, running, being recorded).
    public var held: Int
    /// Of those, waiting for a worker.
    public var queued: Int
    public var submitted: UInt64
    public var succeeded: UInt64
    public var failed: UInt64
    public var cancelled: UInt64
    public var retried: UInt64
    /// The journal's size on disk at the last look, in bytes.
    public var journalBytes: Int
    /// Callers the broker owes an answer about a job: held `mmi.jobs.wait`s, and statuses and
    /// cancels waiting for an outcome being written. Absent from older brokers.
    public var waiters: Int?
    /// The broker's schedules (absent from older brokers).
    public var schedules: ScheduleCounts?
    /// The broker's flows (absent from older brokers).
    public var flows: FlowCounts?
    /// Journal writes that failed since the broker started (a full disk, a store out of
    /// reach), and whether the last write failed: a journal that fails shows here, not only in
    /// the log. Absent from older brokers.
    public var journalFailures: UInt64?
    public var journalFailing: Bool?

    public init(
        held: Int, queued: Int, submitted: UInt64, succeeded: UInt64, failed: UInt64, cancelled: UInt64,
        retried: UInt64, journalBytes: Int, waiters: Int? = nil, schedules: ScheduleCounts? = nil,
        flows: FlowCounts? = nil, journalFailures: UInt64? = nil, journalFailing: Bool? = nil
    ) {
        self.journalFailures = journalFailures
        self.journalFailing = journalFailing
        self.schedules = schedules
        self.flows = flows
        self.held = held
        self.queued = queued
        self.submitted = submitted
        self.succeeded = succeeded
        self.failed = failed
        self.cancelled = cancelled
        self.retried = retried
        self.journalBytes = journalBytes
        self.waiters = waiters
    }
}

/// The broker's schedules, as `broker.stats` and the snapshot count them.
public struct ScheduleCounts: Codable, Sendable, Equatable {
    /// Schedules kept.
    public var count: Int
    /// Of those, paused.
    public var paused: Int
    /// Jobs ticks and triggers made since the broker started (each also a `schedule.fired`).
    public var fired: UInt64
    /// Ticks that made no job because the previous run had not ended (overlap skip), since the
    /// broker started.
    public var skipped: UInt64
    /// The soonest next tick of a schedule that is not paused, ISO 8601 UTC; absent when none.
    public var nextFire: String?

    public init(count: Int, paused: Int, fired: UInt64, skipped: UInt64, nextFire: String?) {
        self.count = count
        self.paused = paused
        self.fired = fired
        self.skipped = skipped
        self.nextFire = nextFire
    }
}

/// The broker's flows, as `broker.stats` and the snapshot count them: how many run now, and
/// how those that ended since the broker started ended (their steps count as jobs).
public struct FlowCounts: Codable, Sendable, Equatable {
    /// Unfinished flows held now.
    public var held: Int
    /// Their steps, all together.
    public var steps: Int
    public var succeeded: UInt64
    public var failed: UInt64
    public var cancelled: UInt64

    public init(held: Int, steps: Int, succeeded: UInt64, failed: UInt64, cancelled: UInt64) {
        self.held = held
        self.steps = steps
        self.succeeded = succeeded
        self.failed = failed
        self.cancelled = cancelled
    }
}

/// One service in one stats period, as `broker.stats` reports it.
public struct ServiceStats: Codable, Sendable, Equatable {
    /// Requests waiting for a worker now.
    public var queued: Int
    /// Their bytes (bodies and trace frames); absent from older brokers.
    public var queuedBytes: Int?
    /// Tasks answered in the period (workers' replies and the broker's own failures).
    public var completed: UInt64
    /// Of those, the ones that were not a success.
    public var failed: UInt64
    public var completedPerSecond: Double
    /// Latency from arrival at the broker to the worker's reply, over the period's replies;
    /// absent without any. Upper bounds of 19 % wide buckets.
    public var p50Milliseconds: Double?
    public var p99Milliseconds: Double?
    /// `true` while the service is paused (`mmi.services.pause`): nothing of it goes to a worker,
    /// so its queue grows with workers idle. Absent when it is not, and from older brokers.
    public var paused: Bool?

    /// Services one `broker.stats` reports at most (the busiest), so that its size stays bounded.
    public static let maxServices = 100

    public init(
        queued: Int, queuedBytes: Int? = nil, completed: UInt64, failed: UInt64, completedPerSecond: Double,
        p50Milliseconds: Double?, p99Milliseconds: Double?, paused: Bool? = nil
    ) {
        self.paused = paused
        self.queued = queued
        self.queuedBytes = queuedBytes
        self.completed = completed
        self.failed = failed
        self.completedPerSecond = completedPerSecond
        self.p50Milliseconds = p50Milliseconds
        self.p99Milliseconds = p99Milliseconds
    }
}
