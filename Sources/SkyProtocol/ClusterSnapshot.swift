/// What the broker counts. Counters only grow during a broker run.
public struct BrokerCounters: Codable, Sendable, Equatable {
    /// Requests accepted from clients.
    public var requestsAccepted: UInt64 = 0
    /// Replies forwarded to clients (from workers or made by the broker).
    public var repliesSent: UInt64 = 0
    /// Messages on the client port that were not valid Sky client commands, dropped.
    public var malformedClientMessages: UInt64 = 0
    /// Messages on the worker port that were not valid Sky worker commands, dropped.
    public var malformedWorkerMessages: UInt64 = 0
    /// Valid worker commands from peers that are not registered workers (answered with DISCONNECT).
    public var unknownWorkerMessages: UInt64 = 0
    /// Replies that could not be delivered because the client was gone, dropped.
    public var undeliverableReplies: UInt64 = 0
    /// Tasks put back in the queue because their worker left while holding them.
    public var requeued: UInt64 = 0
    /// Replies from workers for tasks they no longer hold (re-dispatched, answered, or the
    /// worker was declared dead), dropped so that no client gets two replies.
    public var staleReplies: UInt64 = 0
    /// Workers declared dead because their heartbeats stopped.
    public var workersExpired: UInt64 = 0
    /// Requests refused because the queue was full.
    public var rejectedOverloaded: UInt64 = 0
    /// Requests answered `deadlineExceeded` (queued past their deadline, or their lease ran out).
    public var deadlinesExceeded: UInt64 = 0
    /// Requests that failed because their workers were lost too often.
    public var failedWorkerLost: UInt64 = 0
    /// Requests cancelled by their clients.
    public var cancelled: UInt64 = 0
    /// REQUESTs that repeated a request id already waiting or running (a client retry); ignored,
    /// since the first one will be answered.
    public var duplicateRequests: UInt64 = 0
    /// Connections whose CURVE key is not on the allow-list of the socket's role (ZAP 400).
    public var handshakesDenied: UInt64 = 0
    /// Messages without an authenticated identity of the socket's role, dropped (a CURVE broker
    /// fails closed: libzmq would let them through if its ZAP handler were missing).
    public var unauthenticatedMessages: UInt64 = 0
    /// Messages from a registered worker's routing id under another key, dropped.
    public var spoofedWorkerMessages: UInt64 = 0
    /// Messages over the broker's frame-count or total-size limit, dropped.
    public var oversizedMessages: UInt64 = 0
    /// Replies from workers for deliveries the client had cancelled (for example a hung
    /// attempt the client gave up on and retried): they only return the worker's credit.
    public var repliesAfterCancel: UInt64 = 0
    /// Requests refused because their client already held its share of the queue, and waiting
    /// requests that gave way in a full queue to a client under its fair share.
    public var rejectedClientShare: UInt64 = 0
    /// Requests refused because the queued bodies reached the byte limit (`--queue-bytes`).
    public var rejectedQueueBytes: UInt64 = 0
    /// Requests answered because they waited for a worker longer than `--max-wait`.
    public var maxWaitExpired: UInt64 = 0
    /// Requests answered `noWorkers` because no connected worker served their service.
    public var noWorkersAnswered: UInt64 = 0
    /// Well-formed messages of the other Sky protocol (a client on the workers port, or a
    /// worker on the clients port): answered with the right endpoint, at most a few a second.
    public var misdirectedMessages: UInt64 = 0
    /// READYs refused with REFUSED (malformed, too many services, reserved names).
    public var refusedRegistrations: UInt64 = 0

    public init() {}

    /// What the broker dropped or refused of its peers' messages, by counter name (as protocol.md
    /// lists them), in a fixed order, the nonzero ones only: what a watcher shows of the
    /// counters, since the others are a healthy broker's traffic.
    public var drops: [(name: String, count: UInt64)] {
        [
            ("malformedClientMessages", malformedClientMessages), ("malformedWorkerMessages", malformedWorkerMessages),
            ("unknownWorkerMessages", unknownWorkerMessages), ("oversizedMessages", oversizedMessages),
            ("misdirectedMessages", misdirectedMessages), ("refusedRegistrations", refusedRegistrations),
            ("handshakesDenied", handshakesDenied), ("unauthenticatedMessages", unauthenticatedMessages),
            ("spoofedWorkerMessages", spoofedWorkerMessages), ("staleReplies", staleReplies),
            ("undeliverableReplies", undeliverableReplies),
        ].filter { $0.1 > 0 }
    }
}

/// Memory the broker process uses.
public struct ProcessMemory: Codable, Sendable, Equatable {
    /// Bytes held by live heap allocations.
    public var heapInUse: Int
    /// Resident set size in bytes (includes memory the allocator keeps after frees).
    public var resident: Int

    public init(heapInUse: Int, resident: Int) {
        self.heapInUse = heapInUse
        self.resident = resident
    }
}

/// The broker's current view of the cluster, as answered to `mmi.workers`.
public struct ClusterSnapshot: Codable, Sendable, Equatable {
    /// The sequence number of the last event published before this snapshot was taken.
    public var seq: UInt64
    public var workers: [WorkerInfo]
    /// Requests waiting for a worker, per service.
    public var queued: [String: Int]
    /// Tasks outstanding at workers.
    public var inFlight: Int
    public var counters: BrokerCounters
    /// The broker process's memory, when it measures it.
    public var memory: ProcessMemory?
    /// Names this run of the broker (random, chosen at start): event numbers count per run.
    public var broker: String?
    /// Tasks workers finished since the broker started, failures included (absent from older
    /// brokers; ``BrokerCounters/repliesSent`` also counts the broker's own answers).
    public var tasksCompleted: UInt64?
    /// Of those, the replies that were not a success.
    public var tasksFailed: UInt64?
    /// Durable jobs, with a journal.
    public var jobs: JobCounts?
    /// The broker's turn at a shared job store (PostgreSQL), as in `broker.active`; absent
    /// with a journal of its own, and from older brokers.
    public var epoch: Int64?

    public init(
        seq: UInt64, workers: [WorkerInfo], queued: [String: Int], inFlight: Int, counters: BrokerCounters,
        memory: ProcessMemory? = nil, broker: String? = nil, tasksCompleted: UInt64? = nil, tasksFailed: UInt64? = nil
    ) {
        self.tasksCompleted = tasksCompleted
        self.tasksFailed = tasksFailed
        self.broker = broker
        self.seq = seq
        self.workers = workers
        self.queued = queued
        self.inFlight = inFlight
        self.counters = counters
        self.memory = memory
    }

    /// Requests waiting over all services.
    public var totalQueued: Int { queued.values.reduce(0, +) }
}

/// Services the broker answers itself, after Majordomo's MMI (8/MMI).
public enum BrokerService {
    /// Body: a service name. Reply: "200" if a connected worker serves it, else "404".
    public static let service = "mmi.service"
    /// Reply: a ``ClusterSnapshot`` as JSON.
    public static let workers = "mmi.workers"
    /// Reply: what this broker understands beyond version 1, one name per line (so far
    /// ``TraceContext/feature``). A broker that predates it answers `unknownService`.
    public static let features = "mmi.features"
    /// The prefix reserved for broker services; workers may not register such names.
    public static let prefix = "mmi."

    /// Whether `name` starts with ``prefix`` ("mmi."): its first bytes compared, where
    /// `hasPrefix` compared by characters, about 100 instructions on every request the broker
    /// takes. A test holds the two to the same answers.
    public static func isReserved(_ name: String) -> Bool {
        var bytes = name.utf8.makeIterator()
        return bytes.next() == 0x6D && bytes.next() == 0x6D && bytes.next() == 0x69 && bytes.next() == 0x2E
    }
    /// Body: a ``JobSubmission``. Reply: the job's 16-byte id, once the journal holds it on disk
    /// (for an idempotency key already used, the first job's id).
    public static let jobSubmit = "mmi.jobs.submit"
    /// Body: a 16-byte job id. Reply: a ``JobReport``.
    public static let jobStatus = "mmi.jobs.status"
    /// Body: a 16-byte job id. Reply: a ``JobReport`` once the job ended, or after at most
    /// ``jobWaitHold`` with the job still unfinished (the caller asks again).
    public static let jobWait = "mmi.jobs.wait"
    /// Body: a 16-byte job id. Reply: a ``JobReport`` of the job as it stands after the cancel.
    public static let jobCancel = "mmi.jobs.cancel"
    /// Body: a 16-byte job id of a failed or cancelled job. Reply: the 16-byte id of a new job
    /// with the same task and options (a job that has not ended, or succeeded, is refused).
    public static let jobRetry = "mmi.jobs.retry"
    /// Body: a ``JobQuery``. Reply: a ``JobListing``.
    public static let jobList = "mmi.jobs.list"
    /// Body: a ``BulkAction``. Reply: a ``BulkOutcome``, once the action is taken (its
    /// journal writes on disk).
    public static let jobBulk = "mmi.jobs.bulk"
    /// Everything the broker knows of one job (``JobDetails``, JSON); the body is its 16-byte id.
    public static let jobDescribe = "mmi.jobs.describe"
    /// Every job service above (a broker that stops answers each at once).
    public static let jobServices: Set<String> = [
        jobSubmit, jobStatus, jobWait, jobCancel, jobRetry, jobList, jobBulk, jobDescribe,
    ]
    /// Body: a ``ScheduleSpec``. Reply: the schedule's next tick (i64, milliseconds since 1970),
    /// once it is on disk. A schedule of the same name is replaced.
    /// Records a flow (``FlowSpec``); answers its id (16 bytes) once it is on disk. A flow is
    /// a job of its own: `mmi.jobs.status`, `.wait` and `.cancel` take its id.
    public static let flowSubmit = "mmi.flows.submit"
    /// Where a flow and each of its steps stand (``FlowStatus``); takes the flow's id.
    public static let flowStatus = "mmi.flows.status"
    public static let flowServices: Set<String> = [flowSubmit, flowStatus]
    public static let scheduleSave = "mmi.schedules.save"
    /// Body: a schedule's name. Reply: empty, once on disk. A paused schedule fires nothing.
    public static let schedulePause = "mmi.schedules.pause"
    /// Body: a schedule's name. Reply: its next tick (i64), once on disk; the ticks that
    /// passed while it was paused do not fire.
    public static let scheduleResume = "mmi.schedules.resume"
    /// Body: a schedule's name. Reply: empty, once on disk. Its jobs are left as they are.
    public static let scheduleRemove = "mmi.schedules.remove"
    /// Body: a schedule's name. Reply: the 16-byte id of a job made now, outside its ticks.
    public static let scheduleTrigger = "mmi.schedules.trigger"
    /// Body: empty. Reply: a ``ScheduleListing``.
    public static let scheduleList = "mmi.schedules.list"
    /// Every schedule service above.
    public static let scheduleServices: Set<String> = [
        scheduleSave, schedulePause, scheduleResume, scheduleRemove, scheduleTrigger, scheduleList,
    ]
    /// Body: a service's name. Reply: empty, once the pause is on disk (with a journal). The
    /// service's waiting calls and jobs wait; what runs finishes.
    public static let servicePause = "mmi.services.pause"
    /// Body: a service's name. Reply: empty, once on disk. Its waiting work starts.
    public static let serviceResume = "mmi.services.resume"
    /// Body: empty. Reply: a ``ServiceListing``.
    public static let serviceList = "mmi.services.list"
    /// Every service-control service above.
    /// One service's concurrency keys with work waiting or running (``KeyListing``); the body
    /// is the service's name.
    public static let serviceKeys = "mmi.services.keys"
    public static let serviceServices: Set<String> = [servicePause, serviceResume, serviceList, serviceKeys]
    /// Body: a ``ServiceRateLimit`` as JSON. Reply: 1 byte, 1 if it changed the service's limit
    /// of that kind (per key or not), once on disk (with a journal).
    public static let limitSet = "mmi.limits.set"
    /// Body: a service's name, and a second line ``limitRemoveKeyLine`` to remove its per-key
    /// limit instead of its limit as a whole. Reply: 1 byte, 1 if a limit was removed, once on
    /// disk; a limit the broker's flag sets applies again.
    public static let limitRemove = "mmi.limits.remove"
    /// The second line of an `mmi.limits.remove` that removes a per-key limit.
    public static let limitRemoveKeyLine = "key"
    /// Body: empty. Reply: a ``RateLimitListing``.
    public static let limitList = "mmi.limits.list"
    /// Every rate-limit service above.
    public static let limitServices: Set<String> = [limitSet, limitRemove, limitList]
    /// The longest the broker holds an `mmi.jobs.wait` before answering "not yet".
    public static let jobWaitHold = Duration.seconds(20)
}
