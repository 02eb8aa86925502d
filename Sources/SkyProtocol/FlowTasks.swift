/// How a batch's parts ended: what a batch passes to the step after it (docs/jobs.md,
/// "Batches").
public struct BatchCounts: Codable, Sendable, Equatable {
    public var succeeded: Int
    public var failed: Int
    public var cancelled: Int

    public init(succeeded: Int, failed: Int, cancelled: Int) {
        self.succeeded = succeeded
        self.failed = failed
        self.cancelled = cancelled
    }
}

/// A task whose input is a group's results: it travels as their JSON array, which is what a
/// group passes on. The handler reads ``results``.
public protocol FlowResultsTask: SkyTask {
    associatedtype Element: Codable & Sendable
    var results: [Element] { get }
    init(results: [Element])
}

extension FlowResultsTask {
    public init(from decoder: any Decoder) throws {
        self.init(results: try [Element](from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try results.encode(to: encoder)
    }
}

/// A batch's completion task: it travels as the batch's counts, which is what a batch passes
/// on. The handler reads ``counts``.
public protocol FlowBatchTask: SkyTask {
    var counts: BatchCounts { get }
    init(counts: BatchCounts)
}

extension FlowBatchTask {
    public init(from decoder: any Decoder) throws {
        self.init(counts: try BatchCounts(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try counts.encode(to: encoder)
    }
}
