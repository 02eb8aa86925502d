import SkyJournal
import SkyProtocol

/// What the broker's I/O shell must do after feeding an input to ``BrokerStateMachine``.
///
/// Every action is copied into the machine's list and moved out of it, at the size of the
/// largest case: the rare large ones (an event, 488 bytes; a traced send) are `indirect`, so
/// that an action is the size of a send to a worker.
package enum BrokerAction: Sendable, Equatable {
    /// Send a command to a client on the clients ROUTER.
    case sendToClient(PeerID, BrokerToClient)
    /// Send a command to a worker on the workers ROUTER.
    case sendToWorker(PeerID, BrokerToWorker)
    /// Send a REQUEST that carries a trace context to a worker that takes it: the shell records
    /// the broker's span (queue wait and dispatch) if it has a tracer, and sends that span's
    /// context on; without a tracer, the client's as it came.
    indirect case sendTraced(PeerID, tag: DeliveryTag, TaskRequest, TracedDispatch)
    /// Publish an event. Its ``SkyEvent/time`` is empty: the shell stamps the wall clock.
    indirect case publish(SkyEvent)
    /// Send frames of the *other* port's protocol to a peer that connected to the wrong port
    /// (a worker on the clients port, a client on the workers port), so it learns its mistake.
    case sendRaw(BrokerPort, PeerID, [[UInt8]])
    /// Work for the journal's thread; its answer comes back as ``BrokerStateMachine/journalAnswered(_:now:into:)``.
    case journal(JournalWork)
    /// A stats period ended: each service's latency window, for the metrics.
    case serviceWindows([String: ServiceWindow])
    /// The queue drained after holding much: return freed memory to the system.
    case releaseMemory
    /// Write a log line: a fixed message, and what varies as metadata (swift-log's structured
    /// fields), so that lines can be searched and counted by message.
    case log(BrokerLogLevel, String, [String: String] = [:])
}

/// The broker's two ROUTER ports.
package enum BrokerPort: Sendable, Equatable {
    case clients, workers
}

package enum BrokerLogLevel: Sendable, Equatable {
    case debug, info, warning
}

/// A caller the broker answers about a job once it knows more.
package struct JobCaller: Sendable, Hashable {
    package var peer: PeerID
    package var requestID: RequestID
    package var attempt: UInt32
}

/// What the broker asks of its journal.
package enum JournalWork: Sendable, Equatable {
    /// Write these changes in one of the journal's transactions; report back with `purpose`.
    case write([JobChange], JournalWrite)
    /// As ``write(_:_:)``, but in the journal's next transaction rather than one of its own
    /// (within a few milliseconds): for an outcome nobody waits for yet.
    case writeWithNextCommit([JobChange], JournalWrite)
    /// Commit what is queued now: a caller started to wait for a write made with the next commit.
    case flush
    /// Read a job the broker does not hold in memory (it ended, or is unknown) and answer
    /// `caller`; with `retry`, submit it again as a new job.
    case lookup(JobID, JobCaller, retry: Bool)
    /// Reads a job's record and the record of the job that retried it, for its details.
    case describe(JobID, JobCaller)
    /// Read up to `limit` jobs, newest first, and answer `caller` with them.
    case list(state: JobRecord.State?, service: String?, limit: Int, JobCaller)
    /// Delete at most `limit` expired jobs and measure the journal; save `totals`, the counts
    /// of jobs, if they changed.
    case maintain(nowMilliseconds: Int64, limit: Int, totals: JobTotals?)
    /// Read every schedule (once, at start).
    case loadSchedules
    /// Read the records of a flow's steps (their keys): a flow taken up at a start.
    case loadFlow(JobID, [String])
    /// Read a flow and its steps' records, and answer `caller` with the flow's status.
    case readFlow(JobID, JobCaller)
    /// Select the jobs of a bulk action (``JobStore/select(_:after:limit:)``), those with an
    /// error of `errorType` only if given, for `caller`. (Indirect: rare, and kept out of every
    /// action's size.)
    indirect case select(JobSelection, errorType: String?, JobCaller)
    /// Read these jobs' records (a bulk retry's batch).
    case read([JobID])
}

/// Why the broker wrote to its journal: what it does once the write is durable.
package enum JournalWrite: Sendable, Equatable {
    /// Answer the submit, and start the job.
    case submitted(JobID)
    /// The job's delivery is prepared: it goes to the next free credit.
    case started(JobID)
    /// The job's backoff before its next attempt is recorded (nothing waits for it).
    case rescheduled(JobID)
    /// The job is queued again after its worker was lost (nothing waits for it).
    case requeued(JobID)
    /// The job's prepared start was taken back, for a job of higher priority or a cancel
    /// (nothing waits for it).
    case released(JobID)
    /// Answer whoever waits for the job, and forget it.
    case finished(JobID)
    /// A unique job sent to a worker gave up its key, held while it waited (nothing waits
    /// for it).
    case keyReleased(JobID)
    /// A schedule's ticks made these jobs (maybe none), and it moves on to `next`; `caller`
    /// asked for the tick (a trigger) and hears the job's id.
    /// (Indirect, as the next: rare, and kept out of every action's size.)
    indirect case fired(schedule: String, jobs: [JobID], ticks: [Int64], next: Int64, caller: JobCaller?)
    /// A schedule was saved (with its next tick) or removed; `caller` hears `answer`.
    indirect case scheduleChanged(ScheduleChange, caller: JobCaller, answer: [UInt8])
    /// A flow's record: answer its submitter, and submit its first steps.
    case flowSubmitted(JobID)
    /// A flow's steps: each is a submitted job (``submitted(_:)``) of its flow.
    indirect case flowSteps([JobID])
    /// A flow's outcome (and its steps' retention): answer whoever waits, and forget it.
    case flowEnded(JobID)
    /// A service was paused or resumed (`changed`: it was not so before): answer `caller`, or
    /// undo it if it is not on disk.
    indirect case servicePaused(name: String, paused: Bool, changed: Bool, caller: JobCaller)
    /// A service's set limit was changed to `limit` from `previous` (`nil`: none set): answer
    /// `caller`, or undo it if it is not on disk.
    indirect case serviceLimited(name: String, limit: RateLimit?, previous: RateLimit?, caller: JobCaller)
    /// A bulk delete: answer its caller.
    case bulkDeleted
}

/// What a write of a schedule's definition changes once it is on disk.
package enum ScheduleChange: Sendable, Equatable {
    case saved(ScheduleSpec, nextFire: Int64)
    case removed(String)
}

/// The journal's answer to a ``JournalWork``, fed back to the state machine.
package enum JournalAnswer: Sendable {
    case written(JournalWrite, Result<JournalReceipt, JournalError>)
    case lookedUp(JobID, JobCaller, retry: Bool, Result<JobRecord?, JournalError>)
    case described(JobID, JobCaller, Result<(record: JobRecord?, retriedAs: JobRecord?), JournalError>)
    /// A listing's jobs, and how many matched (counted up to ``JobListing/countedAtMost``).
    case listed(JobCaller, Result<(jobs: [JobRecord], matched: Int), JournalError>)
    /// The journal's size in bytes, and how many expired jobs it deleted.
    case maintained(Result<(bytes: Int, deleted: Int), JournalError>)
    case schedulesLoaded(Result<[ScheduleRecord], JournalError>)
    /// A flow's steps' records (``JournalWork/loadFlow(_:_:)``).
    case flowLoaded(JobID, Result<[JobRecord], JournalError>)
    /// What the journal holds of a flow (``JournalWork/readFlow(_:_:)``).
    case flowRead(JobID, JobCaller, Result<FlowRead, JournalError>)
    /// A bulk action's jobs (``JournalWork/select(_:errorType:_:)``).
    case selected(JobCaller, Result<BulkSelection, JournalError>)
    /// A bulk retry's batch of records (``JournalWork/read(_:)``), in no order.
    case read(Result<BulkRead, JournalError>)
}

/// A flow read back from the journal (``JobScheduler/readFlow(_:record:steps:)``).
package enum FlowRead: Sendable {
    /// Its status's wire form, and whether it ended (its status will not change).
    case status([UInt8], ended: Bool)
    /// The id is a job's of `service`.
    case notAFlow(service: String)
    case unreadable
}

/// What the broker's span of a traced request records.
package struct TracedDispatch: Sendable, Equatable {
    /// From the request's arrival at the broker to this delivery.
    package var waitedNanoseconds: Int64
    package var worker: String
    /// Which delivery this is (1 for the first; more after lost workers).
    package var delivery: UInt32
    /// The worker takes packed REQUESTs.
    package var packed = false
}
