import Foundation

/// A recurring job: what the broker fires, when, and what it does when a tick finds the
/// previous run still going or comes after the broker was down. The body a client sends to
/// save a schedule, and what the broker keeps in its journal.
///
/// Layout (integers big-endian), version 1:
/// `[version=1][name-len u8][name][timing u8]` then, for timing 0 (an interval),
/// `[every-ms u64]`, for timing 1 (cron), `[expression-len u8][expression][zone-len u8][zone]`;
/// then `[overlap u8][catch-up u8][catch-up limit u16][paused u8]` and the job's submission
/// (version 1) as the rest. Binary, as a job submission is, and checked the same way: every
/// field, nothing traps.
public struct ScheduleSpec: Sendable, Equatable {
    /// When it fires.
    public enum Timing: Sendable, Equatable {
        /// Every so many milliseconds, at the multiples of it since 1970 (UTC): an hourly
        /// schedule fires at each full hour, whichever broker runs it, after any restart.
        case every(milliseconds: UInt64)
        /// At the times a cron expression names, in a time zone (an IANA name, or `UTC`).
        case cron(CronExpression, timeZone: String)
    }

    /// What a tick does when the job of the previous tick has not ended.
    public enum Overlap: UInt8, Sendable, Equatable, CaseIterable {
        /// Fires nothing for this tick.
        case skip = 0
        /// Fires; the two may run at once.
        case allow = 1
        /// Cancels the previous job, then fires.
        case cancelPrevious = 2
        /// Waits for the previous job to end, then fires: one tick waits at most, and ticks
        /// that pass meanwhile are merged into it (it fires as the latest of them). Named
        /// ``BrokerFeatures/scheduleQueueFeature`` by the brokers that take it.
        case queue = 3
    }

    /// What a broker that starts (or takes over) does with the ticks that passed while no
    /// broker ran the schedule.
    public enum CatchUp: Sendable, Equatable {
        /// Fires none of them.
        case none
        /// Fires the last of them, once.
        case last
        /// Fires the last `limit` of them (1…``ScheduleSpec/maxCatchUp``), oldest first.
        case all(limit: Int)
    }

    /// Unique among the broker's schedules: saving a schedule of the same name replaces it.
    public var name: String
    public var timing: Timing
    public var overlap: Overlap = .skip
    public var catchUp: CatchUp = .last
    /// A paused schedule fires nothing, and catches up nothing when resumed.
    public var paused = false
    /// The job each tick submits (its idempotency key is the broker's, one per tick).
    public var job: JobSubmission

    public static let version: UInt8 = 1
    /// The shortest interval: a tick a second at most.
    public static let shortestInterval: UInt64 = 1000
    /// The longest interval, a year: a longer one is more likely a unit mistake.
    public static let longestInterval: UInt64 = 366 * 86_400_000
    /// The most missed ticks ``CatchUp/all(limit:)`` fires.
    public static let maxCatchUp = 1000

    public init(name: String, timing: Timing, job: JobSubmission) {
        self.name = name
        self.timing = timing
        self.job = job
    }

    /// The first tick after `milliseconds` (since 1970); `nil` if there is none (a cron
    /// expression that fires no more within 30 years).
    public func next(after milliseconds: Int64) -> Int64? {
        switch timing {
        case .every(let interval):
            let step = Int64(clamping: interval)
            let (ticks, overflow) = (milliseconds >= 0 ? milliseconds / step + 1 : 0).multipliedReportingOverflow(
                by: step)
            return overflow ? nil : ticks
        case .cron(let expression, let zoneName):
            guard let zone = TimeZone(identifier: zoneName) else { return nil }
            let after = Date(timeIntervalSince1970: TimeInterval(milliseconds / 1000))
            return expression.next(after: after, in: zone).map { Int64($0.timeIntervalSince1970) * 1000 }
        }
    }

    /// The wire form. Names and texts longer than the format holds are cut; ``problem`` names
    /// them first.
    public func encode() -> [UInt8] {
        var bytes: [UInt8] = [Self.version]
        Self.appendShort(name, to: &bytes)
        switch timing {
        case .every(let interval):
            bytes.append(0)
            WireFormat.append(interval, to: &bytes)
        case .cron(let expression, let zone):
            bytes.append(1)
            Self.appendShort(expression.text, to: &bytes)
            Self.appendShort(zone, to: &bytes)
        }
        bytes.append(overlap.rawValue)
        switch catchUp {
        case .none: bytes += [0, 0, 0]
        case .last: bytes += [1, 0, 0]
        case .all(let limit):
            bytes.append(2)
            WireFormat.append(UInt16(clamping: limit), to: &bytes)
        }
        bytes.append(paused ? 1 : 0)
        bytes += job.encode()
        return bytes
    }

    /// What is wrong with the schedule before it is sent, or `nil`: the checks the broker
    /// makes, so that a client names the mistake without a round trip.
    public var problem: String? {
        if let problem = WireFormat.nameProblem(name, what: "schedule name") { return problem }
        if let problem = WireFormat.nameProblem(job.service, what: "service name") { return problem }
        if job.service.hasPrefix(BrokerService.prefix) {
            return
                "a schedule cannot run the broker's own \(job.service): \(BrokerService.prefix)* names are the broker's"
        }
        switch timing {
        case .every(let interval):
            guard (Self.shortestInterval...Self.longestInterval).contains(interval) else {
                return
                    "an interval of \(interval) ms; a schedule fires every \(Self.shortestInterval) ms (a second) to \(Self.longestInterval) ms (366 days)"
            }
        case .cron(_, let zone):
            do {
                _ = try TimeZone.named(zone)
            } catch {
                return error.description
            }
        }
        if case .all(let limit) = catchUp {
            guard (1...Self.maxCatchUp).contains(limit) else {
                return "a catch-up of \(limit) missed ticks; 1 to \(Self.maxCatchUp)"
            }
            // Several missed ticks fire at once: under skip, queue or cancel-previous only one would.
            guard overlap == .allow else {
                return
                    "catch-up .all makes a job for each missed tick at once, which only overlap .allow lets run; with .skip, .queue or .cancelPrevious use .last"
            }
        }
        if job.confirmWithinMilliseconds != 0 || job.keyHold != .kept {
            return
                "a schedule's job takes no confirmation bound and no key hold: each tick's job has the broker's own key"
        }
        return nil
    }

    /// Decodes and checks a schedule: every field, every rule of ``problem``.
    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let version = try reader.byte("schedule version")
        guard version == Self.version else {
            throw .invalidValue(name: "schedule version", reason: "\(version); this broker reads \(Self.version)")
        }
        let name = try Self.text(&reader, "schedule name")
        let timing: Timing
        switch try reader.byte("timing") {
        case 0:
            timing = .every(milliseconds: try reader.uint64("interval"))
        case 1:
            let text = try Self.text(&reader, "cron expression")
            let zone = try Self.text(&reader, "time zone")
            do {
                timing = .cron(try CronExpression(text), timeZone: zone)
            } catch {
                throw .invalidValue(name: "cron expression", reason: error.description)
            }
        case let other:
            throw .invalidValue(name: "timing", reason: "\(other); 0 (an interval) or 1 (cron)")
        }
        let overlapByte = try reader.byte("overlap")
        guard let overlap = Overlap(rawValue: overlapByte) else {
            throw .invalidValue(
                name: "overlap", reason: "\(overlapByte); 0 skip, 1 allow, 2 cancel the previous, 3 queue")
        }
        let catchUpKind = try reader.byte("catch-up")
        let limit = Int(try reader.uint16("catch-up limit"))
        let catchUp: CatchUp
        switch catchUpKind {
        case 0 where limit == 0: catchUp = .none
        case 1 where limit == 0: catchUp = .last
        case 0, 1: throw .invalidValue(name: "catch-up limit", reason: "\(limit); 0 unless catch-up is 2 (all)")
        case 2: catchUp = .all(limit: limit)
        default: throw .invalidValue(name: "catch-up", reason: "\(catchUpKind); 0 none, 1 the last, 2 all")
        }
        let pausedByte = try reader.byte("paused")
        guard pausedByte <= 1 else { throw .invalidValue(name: "paused", reason: "\(pausedByte); 0 or 1") }
        let job = reader.rest()
        // Version 1, or 4 for a concurrency key, as the layout says: a submit's confirmation
        // bound and a unique job's hold would be dropped unsaid.
        let jobVersion = job.first
        guard jobVersion == JobSubmission.version || jobVersion == JobSubmission.newestVersion else {
            throw .invalidValue(
                name: "schedule's job",
                reason:
                    "a job submission of version \(jobVersion.map { "\($0)" } ?? "none"); a schedule's job is of version 1, or 4 with a concurrency key"
            )
        }
        let submission = try JobSubmission(decoding: job)
        guard submission.confirmWithinMilliseconds == 0, submission.keyHold == .kept else {
            throw .invalidValue(
                name: "schedule's job",
                reason: "a confirmation bound or a key hold, which a schedule's job does not take")
        }
        var spec = ScheduleSpec(name: name, timing: timing, job: submission)
        spec.overlap = overlap
        spec.catchUp = catchUp
        spec.paused = pausedByte == 1
        if let problem = spec.problem { throw .invalidValue(name: "schedule", reason: problem) }
        self = spec
    }

    private static func appendShort(_ text: String, to bytes: inout [UInt8]) {
        let utf8 = Array(text.utf8.prefix(255))
        bytes.append(UInt8(utf8.count))
        bytes += utf8
    }

    private static func text(_ reader: inout ByteReader, _ name: String) throws(ProtocolError) -> String {
        let bytes = try reader.take(Int(try reader.byte("\(name) length")), name)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .invalidValue(name: name, reason: "not UTF-8")
        }
        return text
    }
}

extension ScheduleSpec.Timing: CustomStringConvertible {
    /// For people: `every 30 s`, `cron 30 2 * * MON-FRI (Europe/Berlin)`.
    public var description: String {
        switch self {
        case .every(let milliseconds):
            for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)]
            where milliseconds % UInt64(size) == 0 {
                return "every \(milliseconds / UInt64(size)) \(unit)"
            }
            return "every \(milliseconds) ms"
        case .cron(let expression, let zone):
            return "cron \(expression.text) (\(zone))"
        }
    }
}

extension ScheduleSpec.Overlap {
    /// The policy's name where people type or read it (skyctl's `--overlap`, skyweb):
    /// `skip`, `allow`, `cancel-previous`, `queue`.
    public var name: String {
        switch self {
        case .skip: "skip"
        case .allow: "allow"
        case .cancelPrevious: "cancel-previous"
        case .queue: "queue"
        }
    }

    public init?(name: String) {
        guard let overlap = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = overlap
    }
}

/// The answer to `mmi.schedules.list`: every schedule, by name, with its next tick and the
/// job its last tick made. Layout: count (u32), then per schedule the spec's length (u32), the
/// spec, the next tick (i64, milliseconds since 1970) and the last job's id (16 bytes, zeros
/// for none).
public struct ScheduleListing: Sendable, Equatable {
    public struct Item: Sendable, Equatable {
        public var spec: ScheduleSpec
        /// The next tick, in milliseconds since 1970 (``nextFireDate`` as a date).
        public var nextFire: Int64
        /// The job of the last tick that made one.
        public var lastJob: JobID?

        public var nextFireDate: Date { Date(timeIntervalSince1970: TimeInterval(nextFire) / 1000) }

        public init(spec: ScheduleSpec, nextFire: Int64, lastJob: JobID?) {
            self.spec = spec
            self.nextFire = nextFire
            self.lastJob = lastJob
        }
    }

    public var items: [Item]

    public init(items: [Item]) { self.items = items }

    public func encode() -> [UInt8] {
        var bytes: [UInt8] = []
        WireFormat.append(UInt32(items.count), to: &bytes)
        for item in items {
            let spec = item.spec.encode()
            WireFormat.append(UInt32(spec.count), to: &bytes)
            bytes += spec
            WireFormat.append(UInt64(bitPattern: item.nextFire), to: &bytes)
            bytes += item.lastJob?.bytes ?? [UInt8](repeating: 0, count: 16)
        }
        return bytes
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let count = Int(try reader.uint32("schedule count"))
        var items: [Item] = []
        items.reserveCapacity(min(count, 10_000))
        for _ in 0..<count {
            let spec = try ScheduleSpec(decoding: try reader.take(Int(try reader.uint32("spec length")), "spec"))
            let next = Int64(bitPattern: try reader.uint64("next tick"))
            let last = try reader.take(16, "last job")
            items.append(
                Item(spec: spec, nextFire: next, lastJob: last.allSatisfy { $0 == 0 } ? nil : JobID(bytes: last)))
        }
        self.items = items
    }
}
