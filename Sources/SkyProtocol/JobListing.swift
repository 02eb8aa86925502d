/// The body of an `mmi.jobs.list` request: which jobs to list.
///
/// Layout: `[state u8, 255 for any][limit u32][service-len u8][service, empty for any]`.
public struct JobQuery: Sendable, Equatable {
    public var state: JobState?
    public var service: String?
    public var limit: UInt32

    /// Most jobs one listing returns, whatever the limit asked.
    public static let maxLimit: UInt32 = 1000

    public init(state: JobState? = nil, service: String? = nil, limit: UInt32 = 100) {
        self.state = state
        self.service = service
        self.limit = limit
    }

    public func encode() -> [UInt8] {
        let serviceBytes = Array((service ?? "").utf8.prefix(255))
        return [state?.rawValue ?? 255] + WireFormat.bytes(limit) + [UInt8(serviceBytes.count)] + serviceBytes
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let raw = try reader.byte("state")
        if raw == 255 {
            state = nil
        } else {
            guard let state = JobState(rawValue: raw) else {
                throw .invalidValue(name: "state", reason: "unknown state \(raw)")
            }
            self.state = state
        }
        limit = min(try reader.uint32("limit"), Self.maxLimit)
        let name = try reader.take(Int(try reader.byte("service length")), "service")
        service = name.isEmpty ? nil : try WireFormat.name(name)
    }
}

/// The reply to `mmi.jobs.list`: jobs with their reports, newest first.
///
/// Layout: `[count u32]` then per job `[id, 16 bytes][report-len u32][JobReport]`.
public struct JobListing: Sendable, Equatable {
    public var jobs: [(id: JobID, report: JobReport)]
    /// How many jobs matched the query, the listed ones included, counted up to
    /// ``countedAtMost`` (a count of that many means "at least"); `nil` from a broker that
    /// predates it.
    public var matched: Int?

    /// Where a listing's count of matches stops.
    public static let countedAtMost = 100_000

    public init(jobs: [(id: JobID, report: JobReport)], matched: Int? = nil) {
        self.jobs = jobs
        self.matched = matched
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.jobs.count == rhs.jobs.count && lhs.matched == rhs.matched
            && zip(lhs.jobs, rhs.jobs).allSatisfy { $0.id == $1.id && $0.report == $1.report }
    }

    public func encode() -> [UInt8] {
        var bytes = WireFormat.bytes(UInt32(jobs.count))
        for (id, report) in jobs {
            let encoded = report.encode()
            bytes += id.bytes
            bytes += WireFormat.bytes(UInt32(encoded.count))
            bytes += encoded
        }
        // After the jobs, where a reader that predates it stops reading.
        if let matched { bytes += WireFormat.bytes(UInt32(clamping: matched)) }
        return bytes
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let count = try reader.uint32("count")
        var jobs: [(id: JobID, report: JobReport)] = []
        for _ in 0..<min(count, JobQuery.maxLimit) {
            guard let id = JobID(bytes: try reader.take(JobID.byteCount, "job id")) else { break }
            let length = try reader.uint32("report length")
            jobs.append((id, try JobReport(decoding: try reader.take(Int(length), "report"))))
        }
        self.jobs = jobs
        if reader.remaining >= 4 { matched = Int(try reader.uint32("matched")) }
    }
}
