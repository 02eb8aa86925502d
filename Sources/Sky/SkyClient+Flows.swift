import SkyProtocol

/// Flows: jobs that feed each other, kept and run by the broker as one whole (docs/jobs.md,
/// "Flows"). A flow is a job of its own: ``status(of:)``, ``cancel(job:)`` and
/// ``result(of:as:coder:)`` take its id.
extension SkyClient {
    /// Records a flow at the broker and returns once it is on the broker's disk; its first
    /// steps are submitted then.
    /// - Throws: ``SkyError/invalidTask(_:)`` naming what is wrong with the flow (more than
    ///   10,000 steps, a bad service name), before anything is sent, or when the broker does
    ///   not take flows (it predates them); as ``submit(_:options:coder:)`` otherwise.
    public nonisolated func submit<Output>(_ flow: Flow<Output>, options: FlowOptions = FlowOptions()) async throws
        -> FlowJob<Output>
    {
        var spec = flow.spec(options: options)
        if spec.idempotencyKey == nil { spec.idempotencyKey = shell.callKey() }
        return FlowJob(id: try await submitFlow(spec), client: self)
    }

    /// Records a flow given in its wire form: for tools that hold no task types. As
    /// `submit(_:options:)`; a flow without an idempotency key gets none (a retry after a lost
    /// answer may then make a second flow).
    /// - Returns: the flow's id.
    public nonisolated func submitFlow(_ spec: FlowSpec) async throws -> JobID {
        if let problem = spec.problem { throw SkyError.invalidTask(problem) }
        try await requireBroker(
            \.takesFlows, named: BrokerFeatures.flowsFeature,
            lacking:
                "this broker does not take flows (it names no \(BrokerFeatures.flowsFeature) in mmi.features); upgrade the broker"
        )
        let reply: [UInt8]
        do {
            reply = try await jobCall(BrokerService.flowSubmit, spec.encode())
        } catch SkyError.invalidPayload(let message) {
            throw SkyError.invalidTask(message)
        }
        guard let id = JobID(bytes: reply) else {
            throw SkyError.internalError("the broker answered a flow's submit with \(reply.count) bytes, not an id")
        }
        return id
    }

    /// Where a flow and each of its steps stand. A flow the broker does not know (never
    /// submitted there, or its retention passed) has state `unknown` and no steps.
    public nonisolated func flowStatus(_ id: JobID) async throws -> FlowStatus {
        let reply: [UInt8]
        do {
            reply = try await jobCall(BrokerService.flowStatus, id.bytes)
        } catch SkyError.invalidPayload(let message) {
            throw SkyError.invalidTask(message)
        }
        do {
            return try FlowStatus(decoding: reply)
        } catch {
            throw SkyError.internalError("the broker's status of flow \(id) is malformed: \(error)")
        }
    }
}

/// A flow submitted to the broker: any process can wait for its result, from its id
/// (``SkyClient/flow(_:as:)``).
public struct FlowJob<Output: Codable & Sendable>: Sendable {
    public let id: JobID
    let client: SkyClient

    /// Waits for the flow to end and returns its result: its last step's (a chain's), or its
    /// parts' in order (a group's).
    /// - Throws: the first failed step's failure as ``SkyError``, its message naming the step;
    ///   ``SkyError/cancelled(_:)`` if the flow was cancelled.
    public var value: Output {
        get async throws { try await client.result(of: id, as: Output.self) }
    }

    /// The flow as a job: queued, running, or how it ended.
    public func status() async throws -> JobStatus { try await client.status(of: id) }

    /// Every step's state, in the flow's shape.
    public func steps() async throws -> FlowStatus { try await client.flowStatus(id) }

    /// Cancels the flow: its waiting steps never run, its running ones are cancelled.
    @discardableResult
    public func cancel() async throws -> JobStatus { try await client.cancel(job: id) }
}

extension SkyClient {
    /// A handle on a flow submitted earlier, maybe by another process.
    public nonisolated func flow<Output>(_ id: JobID, as type: Output.Type = Output.self) -> FlowJob<Output> {
        FlowJob(id: id, client: self)
    }
}
