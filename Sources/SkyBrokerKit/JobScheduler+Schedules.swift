import SkyJSON
import SkyJournal
import SkyProtocol

/// Schedules: the `mmi.schedules.*` requests, and the ticks ``ScheduleBook`` decides on, made
/// into jobs. A tick's jobs and its schedule's next tick are written in one transaction, each
/// job with an idempotency key of its tick's, so that a tick makes its jobs once: a broker
/// that dies before the commit fires the tick again after its restart (or a standby does), one
/// that dies after it finds the tick passed, and a commit whose outcome was unknown, tried
/// again, finds the key taken.
extension JobScheduler {
    // MARK: Requests

    mutating func scheduleRequest(_ request: TaskRequest, from caller: JobCaller, into actions: inout [Action]) {
        guard takesRequests(answering: caller, into: &actions) else { return }
        guard schedules.loaded else {
            answer(
                caller, .journalUnavailable, "the broker is still reading its schedules from the journal; ask again",
                into: &actions)
            return
        }
        let wall = configuration.wallClock()
        if request.service == BrokerService.scheduleSave {
            save(request.body, caller: caller, wall: wall, into: &actions)
            return
        }
        if request.service == BrokerService.scheduleList {
            let items = schedules.entries.values.map {
                ScheduleListing.Item(spec: $0.spec, nextFire: $0.nextFire, lastJob: $0.lastJob)
            }.sorted { $0.spec.name < $1.spec.name }
            answer(caller, id: ScheduleListing(items: items).encode(), into: &actions)
            return
        }
        // Not a name (empty, too long, control characters, not UTF-8): said so, not looked up.
        guard let name = String(validating: request.body, as: UTF8.self) else {
            answer(
                caller, .invalidPayload,
                "\(request.service): the schedule name is not UTF-8 (\(request.body.count) bytes)",
                into: &actions)
            return
        }
        if let problem = WireFormat.nameProblem(name, what: "schedule name") {
            answer(caller, .invalidPayload, "\(request.service): \(problem)", into: &actions)
            return
        }
        guard let entry = schedules.entries[name] else {
            answer(
                caller, .invalidPayload,
                "\(request.service): no schedule named \(String(reflecting: name.prefix(255)))",
                into: &actions)
            return
        }
        guard !entry.writing else {
            answer(caller, .overloaded, "schedule \(name) is being written; ask again", into: &actions)
            return
        }
        switch request.service {
        case BrokerService.schedulePause, BrokerService.scheduleResume:
            var spec = entry.spec
            spec.paused = request.service == BrokerService.schedulePause
            // Resumed, it fires from now: the ticks it missed while paused are not caught up.
            let next = spec.paused ? entry.nextFire : (spec.next(after: wall) ?? entry.nextFire)
            change(
                .saved(spec, nextFire: next), caller: caller, answer: spec.paused ? [] : Self.bytes(next),
                into: &actions)
        case BrokerService.scheduleRemove:
            change(.removed(name), caller: caller, answer: [], into: &actions)
        default:  // trigger
            if book.overLimit || book.jobs.count >= configuration.maxHeldJobs {
                answer(caller, .overloaded, "the broker takes no new jobs now", into: &actions)
                return
            }
            let (id, record) = pend(entry.spec.job, waiter: nil)
            schedules.setWriting(name, true)
            schedules.awaitWrite(caller)
            actions.append(
                .journal(
                    .write(
                        [
                            .submitted(record),
                            .scheduleAdvanced(name: name, nextFire: entry.nextFire, lastJob: id.bytes),
                        ],
                        .fired(schedule: name, jobs: [id], ticks: [], next: entry.nextFire, caller: caller))))
        }
    }

    private mutating func save(_ body: [UInt8], caller: JobCaller, wall: Int64, into actions: inout [Action]) {
        let spec: ScheduleSpec
        do {
            spec = try ScheduleSpec(decoding: body)
        } catch {
            answer(caller, .invalidPayload, "\(BrokerService.scheduleSave): \(error)", into: &actions)
            return
        }
        if schedules.entries[spec.name] == nil, schedules.count >= ScheduleBook.maxSchedules {
            answer(
                caller, .overloaded,
                "the broker keeps \(ScheduleBook.maxSchedules) schedules, its most; remove one first",
                into: &actions)
            return
        }
        if schedules.entries[spec.name]?.writing == true {
            answer(caller, .overloaded, "schedule \(spec.name) is being written; ask again", into: &actions)
            return
        }
        guard let record = schedules.saved(spec, wall: wall) else {
            answer(caller, .invalidPayload, "schedule \(spec.name) never fires again", into: &actions)
            return
        }
        change(
            .saved(spec, nextFire: record.nextFire), caller: caller, answer: Self.bytes(record.nextFire), into: &actions
        )
    }

    private mutating func change(
        _ change: ScheduleChange, caller: JobCaller, answer body: [UInt8], into actions: inout [Action]
    ) {
        let written: JobChange
        switch change {
        case .saved(let spec, let next):
            written = .scheduleSaved(ScheduleRecord(name: spec.name, spec: spec.encode(), nextFire: next))
            if schedules.entries[spec.name] != nil { schedules.setWriting(spec.name, true) }
            schedules.reserve(spec.name)
        case .removed(let name):
            written = .scheduleRemoved(name: name)
            schedules.setWriting(name, true)
        }
        schedules.awaitWrite(caller)
        actions.append(.journal(.write([written], .scheduleChanged(change, caller: caller, answer: body))))
    }

    // MARK: Ticks

    /// Fires the schedules due now: each tick's jobs and the schedule's next tick in one write.
    mutating func fireSchedules(budget: inout WorkBudget, into actions: inout [Action]) {
        let wall = configuration.wallClock()
        for firing in schedules.due(wall: wall, unfinished: { book.jobs[$0] != nil }) {
            budget.spend()
            if let previous = firing.cancel { cancel(previous, caller: nil, into: &actions) }
            guard let spec = schedules.entries[firing.name]?.spec else { continue }
            var changes: [JobChange] = []
            var ids: [JobID] = []
            for tick in firing.ticks {
                var job = spec.job
                job.idempotencyKey = Self.tickKey(firing.name, tick)
                let (id, record) = pend(job, waiter: nil)
                changes.append(.submitted(record))
                ids.append(id)
            }
            changes.append(.scheduleAdvanced(name: firing.name, nextFire: firing.next, lastJob: ids.last?.bytes))
            actions.append(
                .journal(
                    .write(
                        changes,
                        .fired(schedule: firing.name, jobs: ids, ticks: firing.ticks, next: firing.next, caller: nil))))
        }
    }

    /// The idempotency key of a schedule's tick: within 255 bytes whatever the name's length
    /// (its 64-bit FNV-1a hash, and the tick).
    static func tickKey(_ name: String, _ tick: Int64) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return "\(tickKeyPrefix)\(String(hash, radix: 16))/\(tick)"
    }

    /// Taken by no client's submit: a client could otherwise take a future tick's key.
    static let tickKeyPrefix = "sky.schedule/"

    // MARK: The journal's answers

    mutating func schedulesLoaded(_ result: Result<[ScheduleRecord], JournalError>, into actions: inout [Action]) {
        switch result {
        case .success(let records):
            let unreadable = schedules.load(records, wall: configuration.wallClock())
            if !records.isEmpty {
                actions.append(.log(.info, "journal: schedules loaded", ["schedules": "\(records.count)"]))
            }
            for name in unreadable {
                actions.append(
                    .log(
                        .warning, "journal: a schedule is unreadable (a newer broker wrote it); left as it is",
                        ["schedule": name]))
            }
        case .failure(let error):
            // Tried again at the next maintenance would be kinder; a broker without its
            // schedules says so and fires none until restarted.
            actions.append(
                .log(.warning, "journal: the schedules could not be read; none fires", ["error": "\(error)"]))
        }
    }

    mutating func scheduleFired(
        _ name: String, jobs: [JobID], ticks: [Int64], next: Int64, caller: JobCaller?,
        _ result: Result<JournalReceipt, JournalError>, now: Int64, into actions: inout [Action]
    ) {
        let receipt = try? result.get()
        for (index, id) in jobs.enumerated() {
            // Its job's `job.submitted` first, then which tick made it; a tick whose key was
            // taken (a commit tried again) was announced by the write that took it.
            let announced = receipt != nil && receipt?.duplicates[id.bytes] == nil
            let job = announced ? book.pendingSubmits[id]?.job : nil
            submitted(id, result, now: now, into: &actions)
            guard var job else { continue }
            job.attempt = 0  // none has reached a worker, also when its first start is recorded
            schedules.firedTicks += 1
            let tick = index < ticks.count ? JSONText.timestamp(millisecondsSince1970: ticks[index]) : nil
            publish(.scheduleFired, job, status: nil, schedule: ScheduleTick(name: name, tick: tick), into: &actions)
        }
        // A tick tried again after a commit whose outcome was unknown finds its key taken: its
        // job is the one that commit made.
        let last = jobs.last.map { id in receipt?.duplicates[id.bytes].flatMap { JobID(bytes: $0.id) } ?? id }
        schedules.fired(name, next: next, lastJob: last, recorded: receipt != nil)
        guard let caller, schedules.take(caller) else { return }
        switch result {
        case .success: answer(caller, id: last?.bytes ?? [], into: &actions)
        case .failure(let error): answer(caller, .journalUnavailable, error.description, into: &actions)
        }
    }

    mutating func scheduleChanged(
        _ change: ScheduleChange, caller: JobCaller, answer body: [UInt8],
        _ result: Result<JournalReceipt, JournalError>, into actions: inout [Action]
    ) {
        let waiting = schedules.take(caller)
        if case .saved(let spec, _) = change { schedules.release(spec.name) }
        switch (change, result) {
        case (.saved(let spec, let next), .success):
            schedules.put(spec, nextFire: next)
            if waiting { answer(caller, id: body, into: &actions) }
        case (.removed(let name), .success):
            schedules.remove(name)
            if waiting { answer(caller, id: body, into: &actions) }
        case (.saved(let spec, _), .failure(let error)):
            schedules.setWriting(spec.name, false)
            if waiting { answer(caller, .journalUnavailable, error.description, into: &actions) }
        case (.removed(let name), .failure(let error)):
            schedules.setWriting(name, false)
            if waiting { answer(caller, .journalUnavailable, error.description, into: &actions) }
        }
    }

    /// A tick on the wire: i64, big-endian.
    private static func bytes(_ milliseconds: Int64) -> [UInt8] {
        withUnsafeBytes(of: milliseconds.bigEndian, Array.init)
    }
}
