import SkyProtocol

/// The flows the broker runs, and those whose record is being written: state of
/// ``JobScheduler``'s flows (``JobScheduler+Flows.swift``), apart from its jobs'.
struct FlowBook: Sendable {
    /// A flow whose record is being written: who hears its id.
    struct Pending: Sendable {
        var spec: FlowSpec
        var caller: JobCaller
    }

    var runs: [JobID: FlowRun] = [:]
    var pending: [JobID: Pending] = [:]
    /// Flows with work to try again at the next maintenance: a step whose submit or an outcome
    /// whose write failed, or steps that could not be read at a start.
    var retry: Set<JobID> = []
    /// Steps the flows held in memory have: bounded (``maxHeldSteps``) with the flows.
    var heldSteps = 0
    /// Steps of the flows being written, counted with them (a burst of submits is bounded
    /// before any is on disk, without summing the pending ones at each submit).
    private(set) var pendingSteps = 0
    /// Flows that ended since the broker started, by how.
    var ended = EndTally()
    /// The statuses of flows read back from the journal after they ended, newest last (they do
    /// not change): at most ``rememberedStatuses``.
    private var endedStatuses: [(id: JobID, status: [UInt8])] = []
    static let rememberedStatuses = 16
    /// Held and pending flows by idempotency key.
    private(set) var keys: [String: JobID] = [:]

    /// Flows with ready steps beyond what one decision submits (``submitsPerDecision``): they go
    /// on at the broker's next tick.
    var later: Set<JobID> = []

    /// Steps one decision submits at most.
    static let submitsPerDecision = 1000
    /// The most flows held at once: a submit beyond is answered `overloaded`.
    static let maxFlows = 10_000
    /// The most steps of all held flows together.
    static let maxHeldSteps = 1_000_000

    var counts: FlowCounts {
        FlowCounts(
            held: runs.count, steps: heldSteps, succeeded: ended.succeeded, failed: ended.failed,
            cancelled: ended.cancelled)
    }

    func endedStatus(of id: JobID) -> [UInt8]? {
        endedStatuses.last { $0.id == id }?.status
    }

    mutating func remember(_ id: JobID, status: [UInt8]) {
        guard endedStatus(of: id) == nil else { return }
        if endedStatuses.count >= Self.rememberedStatuses { endedStatuses.removeFirst() }
        endedStatuses.append((id, status))
    }

    mutating func pend(_ id: JobID, _ pending: Pending) {
        self.pending[id] = pending
        pendingSteps += pending.spec.steps.count
        if let key = pending.spec.idempotencyKey { keys[key] = id }
    }

    mutating func unpend(_ id: JobID) -> Pending? {
        guard let pending = pending.removeValue(forKey: id) else { return nil }
        pendingSteps -= pending.spec.steps.count
        if let key = pending.spec.idempotencyKey, keys[key] == id { keys[key] = nil }
        return pending
    }

    mutating func hold(_ run: FlowRun) {
        heldSteps += run.jobs.count
        runs[run.id] = run
        if let key = run.spec.idempotencyKey { keys[key] = run.id }
    }

    mutating func release(_ id: JobID) {
        guard let run = runs.removeValue(forKey: id) else { return }
        heldSteps -= run.jobs.count
        retry.remove(id)
        later.remove(id)
        if let key = run.spec.idempotencyKey, keys[key] == id { keys[key] = nil }
    }
}
