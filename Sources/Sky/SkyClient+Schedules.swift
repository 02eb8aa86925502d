import Foundation
import SkyProtocol
import SkyWire

/// Schedules: jobs the broker submits by itself on a timetable, kept in its journal (see
/// docs/jobs.md, "Schedules"). Each tick makes its job once, across restarts and takeovers.
extension SkyClient {
    /// Creates the schedule `name`, or replaces the one of that name: a job of `task` every
    /// `interval` (1 s to 366 days), at the multiples of it since 1970 (UTC), so an hourly
    /// schedule fires at each full hour.
    /// - Returns: when it fires next.
    /// - Throws: ``SkyError/invalidTask(_:)`` naming what is wrong (a name over 255 bytes, an
    ///   interval out of range), before anything is sent.
    @discardableResult
    public nonisolated func schedule<T: SkyTask>(
        name: String, every interval: Duration, task: T, options: JobOptions = JobOptions(),
        overlap: ScheduleSpec.Overlap = .skip, catchUp: ScheduleSpec.CatchUp = .last, coder: some TaskCoder = .json
    ) async throws -> Date {
        guard interval > .zero else {
            throw SkyError.invalidTask(
                "an interval of \(interval) is not a schedule's: give one of 1 s to 366 days")
        }
        let milliseconds = UInt64(clamping: interval.wholeMilliseconds)
        return try await save(
            name: name, timing: .every(milliseconds: milliseconds), task: task, options: options, overlap: overlap,
            catchUp: catchUp, coder: coder)
    }

    /// Creates the schedule `name`, or replaces the one of that name: a job of `task` at the
    /// times the cron expression names (five fields, or `@hourly` and the like) in `timeZone`
    /// (an IANA name; UTC by default). Daylight-saving changes: docs/jobs.md, "Schedules".
    /// - Returns: when it fires next.
    /// - Throws: ``SkyError/invalidTask(_:)`` naming what is wrong with the expression or the
    ///   zone, before anything is sent.
    @discardableResult
    public nonisolated func schedule<T: SkyTask>(
        name: String, cron: String, timeZone: String = "UTC", task: T, options: JobOptions = JobOptions(),
        overlap: ScheduleSpec.Overlap = .skip, catchUp: ScheduleSpec.CatchUp = .last, coder: some TaskCoder = .json
    ) async throws -> Date {
        let expression: CronExpression
        do {
            expression = try CronExpression(cron)
        } catch {
            throw SkyError.invalidTask(error.description)
        }
        return try await save(
            name: name, timing: .cron(expression, timeZone: timeZone), task: task, options: options,
            overlap: overlap, catchUp: catchUp, coder: coder)
    }

    /// Pauses a schedule: it fires nothing until resumed.
    public nonisolated func pauseSchedule(_ name: String) async throws {
        _ = try await scheduleCall(BrokerService.schedulePause, Array(name.utf8))
    }

    /// Resumes a paused schedule from now on: the ticks it missed while paused do not fire.
    /// - Returns: when it fires next.
    @discardableResult
    public nonisolated func resumeSchedule(_ name: String) async throws -> Date {
        try Self.date(try await scheduleCall(BrokerService.scheduleResume, Array(name.utf8)))
    }

    /// Removes a schedule. The jobs it made are left as they are.
    public nonisolated func removeSchedule(_ name: String) async throws {
        _ = try await scheduleCall(BrokerService.scheduleRemove, Array(name.utf8))
    }

    /// Submits the schedule's job now, outside its ticks (its overlap policy does not apply).
    /// - Returns: the job's id.
    public nonisolated func triggerSchedule(_ name: String) async throws -> JobID {
        let reply = try await scheduleCall(BrokerService.scheduleTrigger, Array(name.utf8))
        guard let id = JobID(bytes: reply) else {
            throw SkyError.internalError("the broker answered a trigger with \(reply.count) bytes, not a job id")
        }
        return id
    }

    /// Every schedule, by name, with its next tick and the job of its last.
    public nonisolated func schedules() async throws -> [ScheduleListing.Item] {
        do {
            return try ScheduleListing(decoding: try await jobCall(BrokerService.scheduleList, [])).items
        } catch let error as ProtocolError {
            throw SkyError.internalError("the broker's list of schedules could not be read: \(error)")
        }
    }

    private nonisolated func save<T: SkyTask>(
        name: String, timing: ScheduleSpec.Timing, task: T, options: JobOptions, overlap: ScheduleSpec.Overlap,
        catchUp: ScheduleSpec.CatchUp, coder: some TaskCoder
    ) async throws -> Date {
        let body: [UInt8]
        do {
            body = try coder.encode(task)
        } catch {
            throw SkyError.invalidTask("the task could not be encoded: \(error)")
        }
        return try await schedule(
            name: name, timing: timing, service: T.service, body: body, options: options, overlap: overlap,
            catchUp: catchUp)
    }

    /// Creates the schedule `name`, or replaces the one of that name, with its job's body
    /// already encoded: for tools that hold no task type (`skyctl schedules add`). Saved
    /// `paused`, it fires nothing until resumed.
    /// - Returns: when it fires next.
    /// - Throws: ``SkyError/invalidTask(_:)`` naming what is wrong, before anything is sent;
    ///   also when the schedule queues (`ScheduleSpec.Overlap.queue`) and the broker does not
    ///   say it takes that (one that predates it).
    @discardableResult
    public nonisolated func schedule(
        name: String, timing: ScheduleSpec.Timing, service: String, body: [UInt8], options: JobOptions = JobOptions(),
        overlap: ScheduleSpec.Overlap = .skip, catchUp: ScheduleSpec.CatchUp = .last, paused: Bool = false
    ) async throws -> Date {
        // Each tick's job gets the broker's idempotency key; this one only passes the check.
        var job = try options.submission(service: service, body: body, key: "-")
        job.idempotencyKey = nil
        var spec = ScheduleSpec(name: name, timing: timing, job: job)
        spec.overlap = overlap
        spec.catchUp = catchUp
        spec.paused = paused
        if let problem = spec.problem { throw SkyError.invalidTask(problem) }
        if spec.overlap == .queue {
            try await requireBroker(
                \.takesScheduleQueue, named: BrokerFeatures.scheduleQueueFeature,
                lacking:
                    "overlap .queue needs a broker that names \(BrokerFeatures.scheduleQueueFeature) in mmi.features, and this one does not (it predates it); upgrade the broker, or use .skip"
            )
        }
        return try Self.date(try await scheduleCall(BrokerService.scheduleSave, spec.encode()))
    }

    /// A schedule call: a schedule whose earlier change is still being written is asked again
    /// (for a second at most), and what the broker refuses in the call (an unknown name, a
    /// schedule it cannot take) is ``SkyError/invalidTask(_:)``, which retrying does not help.
    private nonisolated func scheduleCall(_ service: String, _ body: [UInt8]) async throws -> [UInt8] {
        var attempts = 0
        while true {
            do {
                return try await jobCall(service, body)
            } catch SkyError.overloaded(let message) where message.contains("is being written") && attempts < 20 {
                attempts += 1
                try await Task.sleep(for: .milliseconds(50))
            } catch SkyError.invalidPayload(let message) {
                throw SkyError.invalidTask(message)
            }
        }
    }

    private static func date(_ reply: [UInt8]) throws -> Date {
        guard reply.count == 8 else {
            throw SkyError.internalError("the broker answered with \(reply.count) bytes, not a time")
        }
        let milliseconds = Int64(bitPattern: reply.reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        return Date(timeIntervalSince1970: TimeInterval(milliseconds) / 1000)
    }
}
