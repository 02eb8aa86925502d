/// What `mmi.jobs.bulk` does to the jobs a ``JobFilter`` selects: count them (a dry run), run
/// the failed and cancelled ones again, cancel the unfinished ones, or delete the ended ones.
///
/// Layout (docs/protocol.md, "Bulk actions"): `[version 1][action][state][submitted after i64]
/// [submitted before i64][flags][service length][service][error type length][error type]`; the
/// flags say which of the two times are given (any value is a time, 0 and negative ones too).
public struct BulkAction: Sendable, Equatable {
    public enum Kind: UInt8, Sendable, CaseIterable, CustomStringConvertible {
        /// Count what the filter selects, and change nothing.
        case count = 0
        /// Run each failed or cancelled job again, as a new job (as `mmi.jobs.retry` does).
        case retry = 1
        /// Cancel each queued, scheduled or running job (as `mmi.jobs.cancel` does).
        case cancel = 2
        /// Delete each ended job: its id is then unknown.
        case delete = 3

        public var description: String {
            switch self {
            case .count: "count"
            case .retry: "retry"
            case .cancel: "cancel"
            case .delete: "delete"
            }
        }
    }

    public var kind: Kind
    public var filter: JobFilter
    /// Act although the filter selects every job (refused otherwise, so that a forgotten flag
    /// does not delete or retry everything).
    public var all: Bool

    public static let version: UInt8 = 1
    static let allFlag: UInt8 = 1
    static let afterFlag: UInt8 = 2
    static let beforeFlag: UInt8 = 4
    /// The most jobs one bulk action selects; beyond, it acts on the oldest this many and says
    /// how many it left (run it again for the rest).
    public static let maxJobs = 100_000

    public init(_ kind: Kind, filter: JobFilter, all: Bool = false) {
        self.kind = kind
        self.filter = filter
        self.all = all
    }

    public func encode() -> [UInt8] {
        let service = Array((filter.service ?? "").utf8.prefix(255))
        let type = Array((filter.errorType ?? "").utf8.prefix(255))
        let flags: UInt8 =
            (all ? Self.allFlag : 0) | (filter.submittedAfter == nil ? 0 : Self.afterFlag)
            | (filter.submittedBefore == nil ? 0 : Self.beforeFlag)
        return [Self.version, kind.rawValue, filter.state?.rawValue ?? 255]
            + WireFormat.bytes(UInt64(bitPattern: filter.submittedAfter ?? 0))
            + WireFormat.bytes(UInt64(bitPattern: filter.submittedBefore ?? 0))
            + [flags, UInt8(service.count)] + service + [UInt8(type.count)] + type
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let version = try reader.byte("version")
        guard version == Self.version else {
            throw .invalidValue(
                name: "version", reason: "bulk action version \(version) is unknown; this broker reads 1")
        }
        let raw = try reader.byte("action")
        guard let kind = Kind(rawValue: raw) else {
            throw .invalidValue(name: "action", reason: "unknown action \(raw) (0 count, 1 retry, 2 cancel, 3 delete)")
        }
        self.kind = kind
        let state = try reader.byte("state")
        var filter = JobFilter()
        if state != 255 {
            guard let known = JobState(rawValue: state), known != .unknown else {
                throw .invalidValue(name: "state", reason: "unknown state \(state)")
            }
            filter.state = known
        }
        let after = Int64(bitPattern: try reader.uint64("submitted after"))
        let before = Int64(bitPattern: try reader.uint64("submitted before"))
        let flags = try reader.byte("flags")
        filter.submittedAfter = flags & Self.afterFlag == 0 ? nil : after
        filter.submittedBefore = flags & Self.beforeFlag == 0 ? nil : before
        all = flags & Self.allFlag != 0
        let service = try reader.take(Int(try reader.byte("service length")), "service")
        filter.service = service.isEmpty ? nil : try WireFormat.name(service)
        let type = try reader.take(Int(try reader.byte("error type length")), "error type")
        filter.errorType = type.isEmpty ? nil : String(decoding: type, as: UTF8.self)
        self.filter = filter
    }
}

/// Which jobs a bulk action selects: all that match every field given.
public struct JobFilter: Sendable, Equatable {
    public var state: JobState?
    public var service: String?
    /// Submitted at or after this time, in milliseconds since 1970.
    public var submittedAfter: Int64?
    /// Submitted before this time, in milliseconds since 1970.
    public var submittedBefore: Int64?
    /// The `type` of the job's error (a failed or cancelled job's outcome: `handlerError`,
    /// `deadlineExceeded`, `cancelled`, or a handler's own type).
    public var errorType: String?

    public init(
        state: JobState? = nil, service: String? = nil, submittedAfter: Int64? = nil, submittedBefore: Int64? = nil,
        errorType: String? = nil
    ) {
        self.state = state
        self.service = service
        self.submittedAfter = submittedAfter
        self.submittedBefore = submittedBefore
        self.errorType = errorType
    }

    /// Whether it selects every job.
    public var selectsAll: Bool {
        state == nil && service == nil && submittedAfter == nil && submittedBefore == nil && errorType == nil
    }
}

/// The answer to `mmi.jobs.bulk`: how many jobs the filter selected, how many were acted on,
/// and how many of those selected, by the type of their error.
///
/// Layout: `[matched u32][acted u32][left u32][types u32]`, per type `[count u32][length][type]`,
/// then `[retried before u32]`.
public struct BulkOutcome: Sendable, Equatable {
    /// Jobs the filter selected (at most ``BulkAction/maxJobs``).
    public var matched: Int
    /// Of those, the jobs the action was taken on (the others were not in a state it applies
    /// to: a retry takes failed and cancelled jobs, a cancel unfinished ones, a delete ended ones).
    public var acted: Int
    /// Jobs beyond ``BulkAction/maxJobs`` that also matched and were left for another run.
    public var left: Int
    /// The selected jobs with an error, counted by its type, most first.
    public var errorTypes: [(type: String, count: Int)]
    /// A retry's: selected failed or cancelled jobs that a bulk retry ran again before, left
    /// as they are (their job from then stands); not among ``acted``.
    public var retriedBefore: Int

    public init(
        matched: Int, acted: Int, left: Int = 0, errorTypes: [(type: String, count: Int)] = [], retriedBefore: Int = 0
    ) {
        self.matched = matched
        self.acted = acted
        self.left = left
        self.errorTypes = errorTypes
        self.retriedBefore = retriedBefore
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.matched == rhs.matched && lhs.acted == rhs.acted && lhs.left == rhs.left
            && lhs.retriedBefore == rhs.retriedBefore
            && lhs.errorTypes.elementsEqual(rhs.errorTypes) { $0.type == $1.type && $0.count == $1.count }
    }

    public func encode() -> [UInt8] {
        var bytes =
            WireFormat.bytes(UInt32(clamping: matched)) + WireFormat.bytes(UInt32(clamping: acted))
            + WireFormat.bytes(UInt32(clamping: left)) + WireFormat.bytes(UInt32(errorTypes.count))
        for (type, count) in errorTypes {
            let name = Array(type.utf8.prefix(255))
            bytes += WireFormat.bytes(UInt32(clamping: count)) + [UInt8(name.count)] + name
        }
        return bytes + WireFormat.bytes(UInt32(clamping: retriedBefore))
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        matched = Int(try reader.uint32("matched"))
        acted = Int(try reader.uint32("acted"))
        left = Int(try reader.uint32("left"))
        let types = try reader.uint32("types")
        guard types <= 10_000 else { throw .invalidValue(name: "types", reason: "\(types) error types is too many") }
        errorTypes = []
        for _ in 0..<types {
            let count = Int(try reader.uint32("type count"))
            let name = try reader.take(Int(try reader.byte("type length")), "type")
            errorTypes.append((String(decoding: name, as: UTF8.self), count))
        }
        retriedBefore = Int(try reader.uint32("retried before"))
    }
}
