import SkyProtocol
import SkyWire

/// Jobs that feed each other, checked at compile time: each step's task type is the result
/// type of the step before it. Submitted with `SkyClient.submit(_:options:)`, the broker
/// keeps and runs it as one whole (docs/jobs.md, "Flows").
///
/// ```swift
/// // Resize.Result == Compress, Compress.Result == Upload: checked by the compiler.
/// let flow = try Flow(Resize(url: url)).then(Compress.self).then(Upload.self)
/// let uploaded = try await sky.submit(flow).value
/// ```
///
/// Steps' tasks and results travel as JSON (a group's result is the JSON array of its parts'
/// results).
public struct Flow<Output: Codable & Sendable>: Sendable {
    let node: FlowSpec.Node

    init(node: FlowSpec.Node) { self.node = node }

    /// A flow of one step: a job of `task`.
    public init<T: SkyTask>(_ task: T, options: JobOptions = JobOptions()) throws where Output == T.Result {
        let body: [UInt8]
        do {
            body = try JSONTaskCoder().encode(task)
        } catch {
            throw SkyError.invalidTask("the task could not be encoded: \(error)")
        }
        node = .step(try Self.step(T.service, body, options))
    }

    /// A group: the flows run side by side; the result is their results, in order.
    /// - Throws: ``SkyError/invalidTask(_:)`` for no flows.
    public init<Part>(group parts: [Flow<Part>]) throws where Output == [Part] {
        node = .group(try Self.parts(parts.map(\.node)))
    }

    /// A group of one step a task: the tasks run side by side; the result is their results, in
    /// order.
    public init<T: SkyTask>(group tasks: [T], options: JobOptions = JobOptions()) throws where Output == [T.Result] {
        node = .group(try Self.parts(tasks.map { try Flow<T.Result>($0, options: options).node }))
    }

    /// A batch: the flows run side by side, and may fail without stopping the flow; the result
    /// is the counts of how they ended (a completion step follows: a `FlowBatchTask`).
    public init<Part>(batch parts: [Flow<Part>]) throws where Output == BatchCounts {
        node = .batch(try Self.parts(parts.map(\.node)))
    }

    /// A batch of one step a task (as `init(batch:)` of flows).
    public init<T: SkyTask>(batch tasks: [T], options: JobOptions = JobOptions()) throws where Output == BatchCounts {
        node = .batch(try Self.parts(tasks.map { try Flow<T.Result>($0, options: options).node }))
    }

    /// Then a job of `type`, whose task is this group's results (a chord).
    public func then<C: FlowResultsTask>(_ type: C.Type, options: JobOptions = JobOptions()) throws -> Flow<C.Result>
    where Output == [C.Element] {
        Flow<C.Result>(node: try chained(.step(try Self.step(C.service, [], options))))
    }

    /// Then a job of `type`, whose task is this batch's counts (its completion job).
    public func then<C: FlowBatchTask>(_ type: C.Type, options: JobOptions = JobOptions()) throws -> Flow<C.Result>
    where Output == BatchCounts {
        Flow<C.Result>(node: try chained(.step(try Self.step(C.service, [], options))))
    }

    /// The flow's wire form, for ``SkyClient/submitFlow(_:)``.
    public func spec(options: FlowOptions = FlowOptions()) -> FlowSpec {
        var spec = FlowSpec(node, onFailure: options.onFailure)
        spec.retentionMilliseconds = UInt64(clamping: max(0, options.retention.wholeMilliseconds))
        spec.idempotencyKey = options.idempotencyKey
        return spec
    }

    private static func parts(_ nodes: [FlowSpec.Node]) throws -> [FlowSpec.Node] {
        guard !nodes.isEmpty else { throw SkyError.invalidTask("a group or batch needs at least one part") }
        return nodes
    }

    /// This flow then `next`. A chain past ``FlowSpec/maxSteps`` is refused here, as the broker
    /// would refuse it, rather than built step by step first (each `then` copies the chain).
    func chained(_ next: FlowSpec.Node) throws -> FlowSpec.Node {
        if case .chain(let parts) = node {
            guard parts.count < FlowSpec.maxSteps else {
                throw SkyError.invalidTask(
                    "a chain of more than \(FlowSpec.maxSteps) steps: a flow has at most that many")
            }
            return .chain(parts + [next])
        }
        return .chain([node, next])
    }

    static func step(_ service: String, _ body: [UInt8], _ options: JobOptions) throws -> JobSubmission {
        guard options.idempotencyKey == nil, options.unique == nil else {
            throw SkyError.invalidTask(
                "a flow's step takes no idempotency key or unique hold of its own (the flow keys its steps): give the flow's key in FlowOptions"
            )
        }
        // Its confirmation bound is the submit's, not a step's: a step is recorded by the broker.
        var job = try options.submission(service: service, body: body, key: "-")
        job.idempotencyKey = nil
        job.confirmWithinMilliseconds = 0
        return job
    }
}

extension Flow where Output: SkyTask {
    /// Then a job of `type`, whose task is this flow's result (so `type` is this flow's result
    /// type: the compiler checks it).
    public func then(_ type: Output.Type, options: JobOptions = JobOptions()) throws -> Flow<Output.Result> {
        Flow<Output.Result>(node: try chained(.step(try Self.step(Output.service, [], options))))
    }
}

/// How a flow runs and is kept.
public struct FlowOptions: Sendable {
    public var onFailure: FlowSpec.FailurePolicy
    /// How long the flow's outcome, and its steps', are kept after it ended.
    public var retention: Duration
    /// A second submit with the same key, while the first flow is kept, returns the first.
    /// Without one, `SkyClient.submit(_:options:)` makes one of its own, so that its retries
    /// never make a second flow.
    public var idempotencyKey: String?

    public init(
        onFailure: FlowSpec.FailurePolicy = .stop, retention: Duration = .seconds(86_400), idempotencyKey: String? = nil
    ) {
        self.onFailure = onFailure
        self.retention = retention
        self.idempotencyKey = idempotencyKey
    }
}
