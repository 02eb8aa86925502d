/// What a broker says of itself in its answer to `mmi.features`: one line each, a name or a
/// `name=value`. A client asks once per connection; lines it does not know, it ignores.
///
/// Every optional form of a message has a name here, so that a peer can tell whether the
/// broker takes it before it sends it; and the edition line says which meanings the broker
/// gives the messages whose form did not change (docs/protocol.md, "Editions").
public struct BrokerFeatures: Sendable, Equatable {
    /// The edition of docs/protocol.md the broker speaks (`edition=N`); `nil` for a broker
    /// that predates the line (edition 1, or one built between 1 and 2: see the doc).
    public var edition: Int?
    /// The broker takes the REQUEST's trace frame (``TraceContext/feature``).
    public var takesTrace: Bool
    /// The largest frame the broker accepts (`skybroker --max-frame-size`). libzmq closes the
    /// connection of a peer that sends a larger one, before the broker sees the message, so the
    /// sender must check first: a client fails such a task with `requestTooLarge` instead of
    /// losing its connection (and every call on it) each time it sends it. `nil`: a broker that
    /// does not say.
    public var maxFrameSize: Int?
    /// The broker takes packed messages (``WireFormat/packedFeature``): a header frame and a
    /// body frame instead of six or seven frames, the same fields (docs/protocol.md).
    public var takesPacked: Bool
    /// The broker takes the 12-byte REQUEST header (`no-workers-ms` after attempt and timeout).
    /// A broker that predates it drops such a REQUEST as malformed, and its caller times out.
    public var takesNoWorkersGrace: Bool
    /// The broker takes the 16-byte REQUEST header (a `priority` after `no-workers-ms`).
    public var takesPriority: Bool
    /// The newest layout of a job submission the broker reads (`job-submission=N`); `nil`: a
    /// broker that does not say reads version 1 only. Version 2 carries a confirmation bound
    /// (``JobSubmission/confirmWithinMilliseconds``).
    public var jobSubmissionVersion: Int?
    /// The broker takes a schedule with overlap 3 (``ScheduleSpec/Overlap/queue``); one that
    /// does not say refuses it (status 3 `invalidPayload`, naming the overlap).
    public var takesScheduleQueue: Bool
    /// The broker takes flows (`mmi.flows.submit`, ``FlowSpec``); one that does not say
    /// answers them `unknownService`.
    public var takesFlows: Bool
    /// The broker takes the 20-byte REQUEST header and keeps abandoned calls that ask for it
    /// (``RequestHeader/keepIfAbandoned``); one that does not say drops such a REQUEST as
    /// malformed.
    public var keepsAbandonedCalls: Bool
    /// The broker takes `mmi.services.pause`, `.resume` and `.list`; one that does not say
    /// answers them `unknownService`.
    public var pausesServices: Bool
    /// The broker takes `mmi.limits.set`, `.remove` and `.list` (rate limits on services'
    /// starts); one that does not say answers them `unknownService`.
    public var limitsRates: Bool
    /// The broker takes limits per key (``RateLimit/key``) in `mmi.limits.set` and a second
    /// line `key` in `mmi.limits.remove`. A broker that does not say would read such a limit as
    /// one on the whole service: a client does not send it there.
    public var limitsRatesPerKey: Bool
    /// The broker takes `mmi.jobs.bulk` (counts, retries, cancels and deletes jobs by filter;
    /// without a journal it answers `journalUnavailable`); one that does not say answers it
    /// `unknownService`.
    public var actsInBulk: Bool
    /// The broker takes a REQUEST header with a concurrency key (``TaskRequest/concurrencyKey``:
    /// 26 bytes and more); one that does not say drops such a REQUEST as malformed.
    public var takesConcurrencyKeys: Bool
    /// The broker takes `mmi.jobs.describe` (``JobDetails``); one that does not say answers it
    /// `unknownService`.
    public var describesJobs: Bool
    /// The broker takes PROGRESS from workers (``ProgressReport``); said to workers only, in
    /// FEATURES. To one that does not say, a worker sends none.
    public var takesProgress: Bool
    /// The events endpoint the broker bound (`events-endpoint=ENDPOINT`), as libzmq reports it
    /// (a wildcard host as `0.0.0.0`, a port asked as `*` as the one it got): a client that was
    /// not told where the events are subscribes there, rather than at the clients port + 2,
    /// which a broker on chosen or random ports or on `ipc://` does not use. Said to clients
    /// only; `nil`: a broker that does not say.
    public var eventsEndpoint: String?
    /// The broker's heartbeat interval in milliseconds (`heartbeat-ms=N`), said to workers in
    /// FEATURES: a worker that heartbeats less often than the broker's liveness window is
    /// declared dead between two heartbeats and registers again, over and over, and one that
    /// expects the broker's more often than they come reconnects; a Sky worker adopts the
    /// broker's. `nil`: a broker that does not say.
    public var heartbeatMilliseconds: Int?

    /// The edition this build speaks: docs/protocol.md, "Editions". Raised only with a change
    /// of meaning under an unchanged form, together with the doc's "Changes by edition".
    public static let currentEdition = 2
    /// The line that carries ``edition``.
    public static let editionName = "edition"
    /// `edition=N` for ``currentEdition``: a worker names it in its own FEATURES, so that a
    /// broker of a later edition can tell it from a worker that predates the line (which it
    /// serves as edition 2).
    public static let currentEditionLine = "\(editionName)=\(currentEdition)"
    /// The line that names the 12-byte REQUEST header.
    public static let noWorkersGraceFeature = "no-workers-ms"
    /// The line that names the 16-byte REQUEST header.
    public static let priorityFeature = "priority"
    /// The line that names ``takesScheduleQueue``.
    public static let scheduleQueueFeature = "schedule-queue"
    /// The line that names ``takesFlows``.
    public static let flowsFeature = "flows"
    /// The line that names ``keepsAbandonedCalls``.
    public static let keepIfAbandonedFeature = "keep-if-abandoned"
    /// The line that names ``pausesServices``.
    public static let servicePauseFeature = "service-pause"
    /// The line that names ``limitsRates``.
    public static let rateLimitsFeature = "rate-limits"
    /// The line that names ``limitsRatesPerKey``.
    public static let keyRateLimitsFeature = "key-rate-limits"
    /// The line that names ``actsInBulk``.
    public static let bulkActionsFeature = "bulk-actions"
    /// The line that names ``takesConcurrencyKeys``.
    public static let concurrencyKeysFeature = "concurrency-keys"
    /// The line that names ``describesJobs``.
    public static let jobDetailsFeature = "job-details"

    /// The line that carries ``heartbeatMilliseconds``.
    public static let heartbeatName = "heartbeat-ms"
    /// The line that carries ``eventsEndpoint``.
    public static let eventsEndpointName = "events-endpoint"
    /// The line that carries ``maxFrameSize``.
    public static let maxFrameSizeName = "max-frame-size"
    /// The line that carries ``jobSubmissionVersion``.
    public static let jobSubmissionName = "job-submission"
    /// The smallest `--max-frame-size` a broker takes: a body of at most this many bytes fits
    /// within any broker's limit, and needs no check.
    public static let smallestFrameLimit = 1024

    public init(
        edition: Int? = nil, takesTrace: Bool = false, maxFrameSize: Int? = nil, takesPacked: Bool = false,
        takesNoWorkersGrace: Bool = false, takesPriority: Bool = false, jobSubmissionVersion: Int? = nil,
        takesScheduleQueue: Bool = false, takesFlows: Bool = false, keepsAbandonedCalls: Bool = false,
        pausesServices: Bool = false, limitsRates: Bool = false, actsInBulk: Bool = false,
        takesConcurrencyKeys: Bool = false, describesJobs: Bool = false, takesProgress: Bool = false,
        limitsRatesPerKey: Bool = false
    ) {
        self.edition = edition
        self.takesTrace = takesTrace
        self.maxFrameSize = maxFrameSize
        self.takesPacked = takesPacked
        self.takesNoWorkersGrace = takesNoWorkersGrace
        self.takesPriority = takesPriority
        self.jobSubmissionVersion = jobSubmissionVersion
        self.takesScheduleQueue = takesScheduleQueue
        self.takesFlows = takesFlows
        self.keepsAbandonedCalls = keepsAbandonedCalls
        self.pausesServices = pausesServices
        self.limitsRates = limitsRates
        self.limitsRatesPerKey = limitsRatesPerKey
        self.actsInBulk = actsInBulk
        self.takesConcurrencyKeys = takesConcurrencyKeys
        self.describesJobs = describesJobs
        self.takesProgress = takesProgress
    }

    /// Everything this build of the broker says to clients (`mmi.features`); `journal`: it keeps
    /// one (else it cannot keep abandoned calls, and does not say it does).
    public static func broker(maxFrameSize: Int, journal: Bool = true, eventsEndpoint: String? = nil) -> BrokerFeatures
    {
        var features = BrokerFeatures(
            edition: currentEdition, takesTrace: true, maxFrameSize: maxFrameSize, takesPacked: true,
            takesNoWorkersGrace: true, takesPriority: true, jobSubmissionVersion: Int(JobSubmission.newestVersion),
            takesScheduleQueue: true, takesFlows: true, keepsAbandonedCalls: journal, pausesServices: true,
            limitsRates: true, actsInBulk: true, takesConcurrencyKeys: true, describesJobs: true,
            limitsRatesPerKey: true)
        features.eventsEndpoint = eventsEndpoint
        return features
    }

    /// Reads what a broker said, a line each (a FEATURES to a worker carries a line a frame);
    /// lines it does not know, or with a value that is not a whole number, are skipped (a later
    /// broker may say more).
    public init(lines: some Sequence<String>) {
        self.init()
        for text in lines {
            if text == TraceContext.feature {
                takesTrace = true
            } else if text == WireFormat.packedFeature {
                takesPacked = true
            } else if text == Self.noWorkersGraceFeature {
                takesNoWorkersGrace = true
            } else if text == Self.priorityFeature {
                takesPriority = true
            } else if text == Self.scheduleQueueFeature {
                takesScheduleQueue = true
            } else if text == Self.flowsFeature {
                takesFlows = true
            } else if text == Self.keepIfAbandonedFeature {
                keepsAbandonedCalls = true
            } else if text == Self.servicePauseFeature {
                pausesServices = true
            } else if text == Self.rateLimitsFeature {
                limitsRates = true
            } else if text == Self.keyRateLimitsFeature {
                limitsRatesPerKey = true
            } else if text == Self.bulkActionsFeature {
                actsInBulk = true
            } else if text == Self.concurrencyKeysFeature {
                takesConcurrencyKeys = true
            } else if text == Self.jobDetailsFeature {
                describesJobs = true
            } else if text == ProgressReport.feature {
                takesProgress = true
            } else if text.hasPrefix(Self.eventsEndpointName + "="), text.count > Self.eventsEndpointName.count + 1 {
                eventsEndpoint = String(text.dropFirst(Self.eventsEndpointName.count + 1))
            } else if let equals = text.firstIndex(of: "="),
                let value = Int(text[text.index(after: equals)...]), value > 0
            {
                switch text[..<equals] {
                case Self.maxFrameSizeName[...]: maxFrameSize = value
                case Self.editionName[...]: edition = value
                case Self.jobSubmissionName[...]: jobSubmissionVersion = value
                case Self.heartbeatName[...]: heartbeatMilliseconds = value
                default: break
                }
            }
        }
    }

    /// Reads an answer to `mmi.features`: the lines of ``init(lines:)``, one per text line.
    public init(decoding body: [UInt8]) {
        self.init(lines: body.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) })
    }

    /// What the broker says, a line each.
    public var lines: [String] {
        var lines: [String] = []
        if let edition { lines.append("\(Self.editionName)=\(edition)") }
        if takesTrace { lines.append(TraceContext.feature) }
        if let maxFrameSize { lines.append("\(Self.maxFrameSizeName)=\(maxFrameSize)") }
        if takesPacked { lines.append(WireFormat.packedFeature) }
        if takesNoWorkersGrace { lines.append(Self.noWorkersGraceFeature) }
        if takesPriority { lines.append(Self.priorityFeature) }
        if let jobSubmissionVersion { lines.append("\(Self.jobSubmissionName)=\(jobSubmissionVersion)") }
        if takesScheduleQueue { lines.append(Self.scheduleQueueFeature) }
        if takesFlows { lines.append(Self.flowsFeature) }
        if keepsAbandonedCalls { lines.append(Self.keepIfAbandonedFeature) }
        if pausesServices { lines.append(Self.servicePauseFeature) }
        if limitsRates { lines.append(Self.rateLimitsFeature) }
        if limitsRatesPerKey { lines.append(Self.keyRateLimitsFeature) }
        if actsInBulk { lines.append(Self.bulkActionsFeature) }
        if takesConcurrencyKeys { lines.append(Self.concurrencyKeysFeature) }
        if describesJobs { lines.append(Self.jobDetailsFeature) }
        if takesProgress { lines.append(ProgressReport.feature) }
        if let eventsEndpoint { lines.append("\(Self.eventsEndpointName)=\(eventsEndpoint)") }
        if let heartbeatMilliseconds { lines.append("\(Self.heartbeatName)=\(heartbeatMilliseconds)") }
        return lines
    }

    /// The answer's body to `mmi.features`.
    public func encode() -> [UInt8] {
        Array(lines.joined(separator: "\n").utf8)
    }
}
