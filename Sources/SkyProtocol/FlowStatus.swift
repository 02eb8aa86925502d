/// The answer to `mmi.flows.status`: where a flow and each of its steps stand, in the flow's
/// shape (for skyweb's tree and `skyctl flows show`).
///
/// Layout (integers big-endian), version 1: `[version=1][flow state u8 (JobState)][on-failure u8]`
/// then the tree, each node `[kind u8]` as in ``FlowSpec``; a step is
/// `[0][step state u8][attempt u32][job id: 16 bytes, zeros before it is submitted][service-len u8][service]`,
/// a chain, group or batch `[kind][count u32]` and its parts.
public struct FlowStatus: Sendable, Equatable {
    /// Where a step stands.
    public enum StepState: UInt8, Sendable, Equatable, CaseIterable, CustomStringConvertible {
        /// Not submitted yet: its input is not ready.
        case waiting = 0
        case queued = 1
        case scheduled = 2
        case running = 3
        case succeeded = 4
        case failed = 5
        /// Cancelled, or never run because the flow stopped or the step it needed failed.
        case cancelled = 6

        public var description: String {
            switch self {
            case .waiting: "waiting"
            case .queued: "queued"
            case .scheduled: "scheduled"
            case .running: "running"
            case .succeeded: "succeeded"
            case .failed: "failed"
            case .cancelled: "cancelled"
            }
        }

        /// A job's state as a step's.
        public init(_ state: JobState) {
            switch state {
            case .queued: self = .queued
            case .scheduled: self = .scheduled
            case .running: self = .running
            case .succeeded: self = .succeeded
            case .failed: self = .failed
            case .cancelled: self = .cancelled
            case .unknown: self = .waiting
            }
        }
    }

    public struct Step: Sendable, Equatable {
        /// Its number: its place in the order the flow's tree is written, from 0.
        public var index: Int
        public var service: String
        public var state: StepState
        /// Executions so far.
        public var attempt: UInt32
        /// Its job, once submitted.
        public var job: JobID?

        public init(index: Int, service: String, state: StepState, attempt: UInt32 = 0, job: JobID? = nil) {
            self.index = index
            self.service = service
            self.state = state
            self.attempt = attempt
            self.job = job
        }
    }

    public indirect enum Node: Sendable, Equatable {
        case step(Step)
        case chain([Node])
        case group([Node])
        case batch([Node])
    }

    public var state: JobState
    public var onFailure: FlowSpec.FailurePolicy
    public var root: Node

    public static let version: UInt8 = 1

    public init(state: JobState, onFailure: FlowSpec.FailurePolicy, root: Node) {
        self.state = state
        self.onFailure = onFailure
        self.root = root
    }

    /// Every step, in their order.
    public var steps: [Step] {
        var steps: [Step] = []
        func walk(_ node: Node) {
            switch node {
            case .step(let step): steps.append(step)
            case .chain(let parts), .group(let parts), .batch(let parts): parts.forEach(walk)
            }
        }
        walk(root)
        return steps
    }

    public func encode() -> [UInt8] {
        var bytes: [UInt8] = [Self.version, state.rawValue, onFailure.rawValue]
        func append(_ node: Node) {
            switch node {
            case .step(let step):
                bytes += [0, step.state.rawValue]
                WireFormat.append(step.attempt, to: &bytes)
                bytes += step.job?.bytes ?? [UInt8](repeating: 0, count: 16)
                let name = Array(step.service.utf8.prefix(255))
                bytes.append(UInt8(name.count))
                bytes += name
            case .chain(let parts), .group(let parts), .batch(let parts):
                switch node {
                case .chain: bytes.append(1)
                case .group: bytes.append(2)
                default: bytes.append(3)
                }
                WireFormat.append(UInt32(parts.count), to: &bytes)
                parts.forEach(append)
            }
        }
        append(root)
        return bytes
    }

    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let version = try reader.byte("flow status version")
        guard version == Self.version else {
            throw .invalidValue(name: "flow status version", reason: "\(version); this reads \(Self.version)")
        }
        let stateByte = try reader.byte("flow state")
        guard let state = JobState(rawValue: stateByte) else {
            throw .invalidValue(name: "flow state", reason: "\(stateByte) names no state")
        }
        let policyByte = try reader.byte("flow on-failure")
        guard let policy = FlowSpec.FailurePolicy(rawValue: policyByte) else {
            throw .invalidValue(name: "flow on-failure", reason: "\(policyByte) names no policy")
        }
        var index = 0
        func node(depth: Int) throws(ProtocolError) -> Node {
            guard depth <= FlowSpec.maxDepth else {
                throw .invalidValue(name: "flow status", reason: "nested deeper than \(FlowSpec.maxDepth)")
            }
            let kind = try reader.byte("node kind")
            if kind == 0 {
                let stateByte = try reader.byte("step state")
                guard let state = StepState(rawValue: stateByte) else {
                    throw .invalidValue(name: "step state", reason: "\(stateByte) names no state")
                }
                let attempt = try reader.uint32("step attempt")
                let id = try reader.take(16, "step job")
                let name = try reader.take(Int(try reader.byte("service length")), "service")
                defer { index += 1 }
                return .step(
                    Step(
                        index: index, service: String(decoding: name, as: UTF8.self), state: state, attempt: attempt,
                        job: id.allSatisfy { $0 == 0 } ? nil : JobID(bytes: id)))
            }
            guard (1...3).contains(kind) else {
                throw .invalidValue(name: "node kind", reason: "\(kind); 0 step, 1 chain, 2 group, 3 batch")
            }
            let count = Int(try reader.uint32("part count"))
            guard count <= FlowSpec.maxSteps else {
                throw .invalidValue(name: "flow status", reason: "\(count) parts, over \(FlowSpec.maxSteps)")
            }
            var parts: [Node] = []
            for _ in 0..<count { parts.append(try node(depth: depth + 1)) }
            return kind == 1 ? .chain(parts) : kind == 2 ? .group(parts) : .batch(parts)
        }
        root = try node(depth: 0)
        self.state = state
        onFailure = policy
    }
}
