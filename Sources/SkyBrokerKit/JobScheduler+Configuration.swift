import SkyJournal
import SkyProtocol

extension JobScheduler {
    /// What the scheduler is told at its start: the broker's job settings.
    struct Configuration: Sendable {
        /// Whether the broker has a journal; without one, job requests are answered
        /// `journalUnavailable`.
        var journal: Bool
        /// Journal bytes beyond which new jobs are refused; 0 for no limit.
        var journalMaxBytes: Int
        /// Submits awaiting the journal, and reads in flight, at most each (`--queue-limit`).
        var inFlightLimit: Int
        var maxHeldJobs: Int
        var maxHeldJobBytes: Int
        /// The longest an `mmi.jobs.wait` is held, in nanoseconds.
        var waitHold: Int64
        /// How long a failed job is kept at least, in milliseconds.
        var failedRetention: Int64
        /// Workers lost while running a job before it fails with `workerLost`.
        var maxLosses: Int
        /// Nanoseconds between two journal maintenances.
        var maintenanceInterval: Int64
        /// Wall-clock milliseconds since 1970.
        var wallClock: @Sendable () -> Int64
        /// The largest frame the broker takes (`--max-frame-size`): a flow's group whose result
        /// (its parts' results together) would be larger fails, since no step or client could
        /// be sent it.
        var maxFrameSize: Int

        init(_ routing: BrokerRouting) {
            journal = routing.journal
            journalMaxBytes = routing.journalMaxBytes
            inFlightLimit = routing.queueLimit
            maxHeldJobs = routing.maxHeldJobs
            maxHeldJobBytes = routing.maxHeldJobBytes
            waitHold = BrokerStateMachine.nanoseconds(routing.jobWaitHold)
            failedRetention = BrokerStateMachine.nanoseconds(routing.failedRetention) / 1_000_000
            maxLosses = routing.maxDeliveries
            maintenanceInterval = BrokerStateMachine.nanoseconds(routing.journalMaintenanceInterval)
            wallClock = routing.wallClock
            maxFrameSize = Int(clamping: routing.maxFrameSize)
        }
    }

    /// What the broker does after an input, in order.
    enum Action: Sendable, Equatable {
        /// Answer a caller of `mmi.jobs.*`.
        case answer(JobCaller, TaskReply)
        case journal(JournalWork)
        /// Publish a job event (built only if a watcher takes it).
        case publish(EventKind, JobEvent)
        /// Prepared jobs of `service` wait: its workers with free credits take them.
        case offer(service: String)
        /// Cancel a job's running attempt (its delivery `tag`) at its worker.
        case cancelAttempt(JobID, tag: UInt64)
        case log(BrokerLogLevel, String, [String: String])
        /// Count in the broker's counters.
        case count(Count)
    }

    enum Count: Sendable, Equatable {
        /// A submit or a read refused `overloaded`.
        case refusedOverloaded
        case cancelled
        /// A job failed because the workers running it were lost too often.
        case failedWorkerLost
        /// A call repeated while the same call (peer, request id and attempt) waits: answered
        /// once.
        case duplicate
    }

    /// What a job event says.
    struct JobEvent: Sendable, Equatable {
        var id: JobID
        var service: String
        var attempt: UInt32
        var status: ReplyStatus?
        /// For `schedule.fired`.
        var schedule: ScheduleTick?
        /// For `job.progress`.
        var progress: Double? = nil
        var message: String? = nil
    }

    /// How a job goes on after the worker running it was lost.
    enum Loss: Sendable, Equatable {
        case requeued, failed
    }

    /// A prepared job taken for a delivery.
    struct Delivery: Sendable {
        var id: JobID
        /// Its order among the jobs (older first at equal priority).
        var order: UInt64
        var request: TaskRequest
    }
}
