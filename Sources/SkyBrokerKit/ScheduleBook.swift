import SkyJSON
import SkyJournal
import SkyProtocol

/// The broker's schedules: which tick fires when, and what each tick does about the previous
/// run (overlap) and about the ticks that passed while no broker ran (catch-up). A sub-machine
/// of ``JobScheduler``, which makes and records the jobs it decides on: a tick's jobs and the
/// schedule's next tick go in one transaction, so a tick makes its jobs once whatever restarts.
///
/// Times are wall-clock milliseconds since 1970 (`wall`): ticks are calendar facts that outlive
/// the process, as job ids and not-before times are.
struct ScheduleBook: Sendable {
    struct Entry: Sendable {
        var spec: ScheduleSpec
        /// The next tick not yet recorded as passed.
        var nextFire: Int64
        /// The job of the last tick that made one.
        var lastJob: JobID?
        /// A write of its tick (or of a change to it) is in flight: it fires nothing meanwhile.
        var writing = false
        /// A walk over many passed ticks, cut at ``ScheduleBook/maxStepsPerTick``: where it goes
        /// on at the next tick of the broker's clock (in memory: a broker that dies meanwhile
        /// walks again from ``nextFire``).
        var walk: Walk?
    }

    /// The ticks walked so far, sorted into those before this run (the last few, as many as
    /// the catch-up policy keeps) and after it.
    struct Walk: Sendable, Equatable {
        var cursor: Int64
        var missed: [Int64] = []
        var live: [Int64] = []
    }

    /// What a tick of the broker's clock asks the scheduler to do for one schedule.
    struct Firing: Sendable, Equatable {
        var name: String
        /// The ticks that make a job, oldest first (empty: the ticks passed, nothing fires).
        var ticks: [Int64]
        /// The schedule's next tick once these are recorded.
        var next: Int64
        /// The previous tick's job, to cancel first (``ScheduleSpec/Overlap/cancelPrevious``).
        var cancel: JobID?
        /// Ticks that make no job because the previous run has not ended (overlap skip).
        var skipped = 0
    }

    private(set) var entries: [String: Entry] = [:]
    /// Loaded from the journal: until then nothing fires and requests are refused.
    private(set) var loaded = false
    /// When this broker's run began: ticks before it passed while no broker ran them, and the
    /// catch-up policy decides; ticks after it fire.
    private var runStart: Int64 = 0
    /// Callers whose answer waits for a write: answered once, by the write or by the shutdown.
    private var callers: Set<JobCaller> = []
    /// New schedules whose first write is in flight: they count toward ``maxSchedules``.
    private(set) var reserved: Set<String> = []
    /// Jobs made by ticks and triggers since the broker started.
    var firedTicks: UInt64 = 0
    /// Ticks that made no job because the previous run had not ended.
    private(set) var skippedTicks: UInt64 = 0

    /// Schedules kept and being made.
    var count: Int { entries.count + reserved.count }

    /// The counts `broker.stats` reports.
    var counts: ScheduleCounts {
        var paused = 0
        var soonest: Int64?
        for entry in entries.values {
            if entry.spec.paused {
                paused += 1
            } else if soonest.map({ entry.nextFire < $0 }) ?? true {
                soonest = entry.nextFire
            }
        }
        return ScheduleCounts(
            count: entries.count, paused: paused, fired: firedTicks, skipped: skippedTicks,
            nextFire: soonest.map(JSONText.timestamp(millisecondsSince1970:)))
    }

    mutating func reserve(_ name: String) {
        if entries[name] == nil { reserved.insert(name) }
    }

    mutating func release(_ name: String) {
        reserved.remove(name)
    }

    /// The most schedules a broker keeps: each is looked at every tick of its clock.
    static let maxSchedules = 10_000
    /// The most ticks looked at for one schedule in one tick of the broker's clock (a cron
    /// schedule after a long downtime): the rest are looked at in the next ticks, so that the
    /// broker's loop stays short.
    static let maxStepsPerTick = 1000

    /// The schedules the journal holds, at start. One that cannot be read any more (a newer
    /// broker wrote it) is left in the journal, named in the returned list.
    mutating func load(_ records: [ScheduleRecord], wall: Int64) -> [String] {
        runStart = wall
        loaded = true
        var unreadable: [String] = []
        for record in records {
            guard let spec = try? ScheduleSpec(decoding: record.spec) else {
                unreadable.append(record.name)
                continue
            }
            entries[record.name] = Entry(
                spec: spec, nextFire: record.nextFire, lastJob: record.lastJob.flatMap(JobID.init(bytes:)))
        }
        return unreadable
    }

    /// A schedule saved: its first tick after `wall`, unless it existed, running, with the same
    /// timing, whose next tick it keeps (so a save of an unchanged schedule neither skips nor
    /// repeats one). A paused one saved starts from now, as a resumed one does.
    func saved(_ spec: ScheduleSpec, wall: Int64) -> ScheduleRecord? {
        let kept = entries[spec.name].flatMap {
            $0.spec.timing == spec.timing && !$0.spec.paused ? $0.nextFire : nil
        }
        guard let next = kept ?? spec.next(after: wall) else { return nil }
        return ScheduleRecord(name: spec.name, spec: spec.encode(), nextFire: next)
    }

    mutating func put(_ spec: ScheduleSpec, nextFire: Int64) {
        entries[spec.name, default: Entry(spec: spec, nextFire: nextFire)].spec = spec
        entries[spec.name]?.nextFire = nextFire
        entries[spec.name]?.writing = false
        entries[spec.name]?.walk = nil
    }

    mutating func remove(_ name: String) {
        entries[name] = nil
    }

    mutating func awaitWrite(_ caller: JobCaller) {
        callers.insert(caller)
    }

    /// Whether `caller` still waits (the shutdown did not answer it): it is answered now.
    mutating func take(_ caller: JobCaller) -> Bool {
        callers.remove(caller) != nil
    }

    mutating func takeCallers() -> Set<JobCaller> {
        defer { callers.removeAll() }
        return callers
    }

    mutating func setWriting(_ name: String, _ writing: Bool) {
        entries[name]?.writing = writing
    }

    /// A tick's write is done: on success the schedule moves on to `next`.
    mutating func fired(_ name: String, next: Int64, lastJob: JobID?, recorded: Bool) {
        guard entries[name] != nil else { return }
        entries[name]?.writing = false
        guard recorded else { return }  // the same ticks are tried again at the next tick
        entries[name]?.nextFire = next
        if let lastJob { entries[name]?.lastJob = lastJob }
    }

    /// The schedules due at `wall`, each marked as writing. `unfinished` says whether a job
    /// the broker made earlier has not ended (it is held).
    mutating func due(wall: Int64, unfinished: (JobID) -> Bool) -> [Firing] {
        guard loaded else { return [] }
        var firings: [Firing] = []
        for (name, entry) in entries where !entry.writing && !entry.spec.paused && entry.nextFire <= wall {
            switch Self.firing(name, entry, wall: wall, runStart: runStart, unfinished: unfinished) {
            case .fire(let firing):
                skippedTicks += UInt64(firing.skipped)
                entries[name]?.walk = nil
                entries[name]?.writing = true
                firings.append(firing)
            case .walking(let walk):
                entries[name]?.walk = walk
            case .waiting:
                break
            }
        }
        return firings.sorted { $0.name < $1.name }
    }

    enum Decision: Sendable, Equatable {
        case fire(Firing)
        /// More ticks passed than one tick of the broker's clock looks at: nothing fires yet.
        case walking(Walk)
        /// The tick waits for the previous run to end (``ScheduleSpec/Overlap/queue``):
        /// nothing moves, so that a broker that restarts meanwhile waits for it too.
        case waiting
    }

    /// The ticks of `entry` from its next to `wall` (at most ``maxStepsPerTick`` at a time),
    /// sorted into missed (before this run) and live ones, then cut by its policies.
    static func firing(
        _ name: String, _ entry: Entry, wall: Int64, runStart: Int64, unfinished: (JobID) -> Bool
    ) -> Decision {
        let spec = entry.spec
        let previousRunning = entry.lastJob.map(unfinished) ?? false
        // Looked at before the walk: a tick that waits costs one lookup per tick of the clock.
        if spec.overlap == .queue, previousRunning { return .waiting }
        let keep: Int
        switch spec.catchUp {
        case .none: keep = 0
        case .last: keep = 1
        case .all(let limit): keep = limit
        }
        var cursor = entry.walk?.cursor ?? entry.nextFire
        // An interval's missed ticks are counted, not walked: after a day down, a 1 s schedule
        // has 86,400 of them, of which at most `keep` fire.
        if entry.walk == nil, case .every(let interval) = spec.timing, cursor < runStart {
            let step = Int64(clamping: interval)
            let lastMissed = cursor + (min(runStart - 1, wall) - cursor) / step * step
            cursor = max(cursor, lastMissed - Int64(max(keep, 1) - 1) * step)
        }
        var missed = entry.walk?.missed ?? []
        var live = entry.walk?.live ?? []
        var steps = 0
        while cursor <= wall, steps < maxStepsPerTick {
            if cursor < runStart {
                missed.append(cursor)
                if missed.count > keep { missed.removeFirst() }
            } else {
                live.append(cursor)
                // Only a broker stalled for a thousand ticks has more: the latest are kept.
                if live.count > ScheduleSpec.maxCatchUp { live.removeFirst() }
            }
            guard let next = spec.next(after: cursor) else {
                cursor = .max
                break
            }
            cursor = next
            steps += 1
        }
        if cursor <= wall { return .walking(Walk(cursor: cursor, missed: missed, live: live)) }
        var ticks = missed + live
        var cancel: JobID?
        var skipped = 0
        switch spec.overlap {
        case .allow:
            break
        case .skip:
            // Each tick would overlap the one before it: the latest fires, if the last run ended.
            if previousRunning { skipped = ticks.count }
            ticks = previousRunning ? [] : Array(ticks.suffix(1))
        case .queue:
            // The last run ended (or it would be waiting): the ticks that waited are one.
            ticks = Array(ticks.suffix(1))
        case .cancelPrevious:
            // Each would cancel the one before it: the last fires, after the running one's cancel.
            ticks = Array(ticks.suffix(1))
            if previousRunning, !ticks.isEmpty { cancel = entry.lastJob }
        }
        return .fire(Firing(name: name, ticks: ticks, next: cursor, cancel: cancel, skipped: skipped))
    }
}
