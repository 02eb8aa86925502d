/// A flow: jobs that feed each other, kept and run by the broker as one whole. The body a
/// client sends to `mmi.flows.submit`, and what the broker keeps in its journal.
///
/// A flow is a tree. A **step** is one job. A **chain** runs its parts one after another, each
/// part's task being the previous part's result; its result is its last part's. A **group**
/// runs its parts side by side, each given the same input; its result is the JSON array of its
/// parts' results, in order. A **batch** is a group whose parts may fail without stopping the
/// flow; its result is the counts of its parts' ends, `{"cancelled":C,"failed":F,"succeeded":S}`.
/// A chord is a chain of a group and a step; a batch's completion job is a chain of a batch
/// and a step.
///
/// A step that comes first (the flow's first, or first in a chain that comes first, or any
/// part of a group that comes first) runs the task in its body; any other step's task is its
/// input, and its body must be empty.
///
/// Layout (integers big-endian), version 1:
/// `[version=1][on-failure u8][retention-ms u64][key-len u8][idempotency key][node]`, where a
/// node is `[kind u8]`, then for a step (kind 0) `[length u32]` and its job's submission
/// (version 1: ``JobSubmission/encode()`` with no key, confirmation bound or key hold), and for
/// a chain (1), a group (2) or a batch (3) `[count u32]` and that many nodes. Checked as a job
/// submission is: every field, nothing traps.
public struct FlowSpec: Sendable, Equatable {
    public indirect enum Node: Sendable, Equatable {
        case step(JobSubmission)
        case chain([Node])
        case group([Node])
        case batch([Node])
    }

    /// What a step's failure (or cancellation) does to the rest of the flow.
    public enum FailurePolicy: UInt8, Sendable, Equatable, CaseIterable {
        /// The flow stops: its running and waiting steps are cancelled; it fails with the
        /// first step's failure.
        case stop = 0
        /// The flow goes on with every step that does not need the failed step's result (those
        /// that do are cancelled); it fails once nothing is left to run, naming each failure.
        case goOn = 1

        /// As people type and read it (skyctl): `stop`, `go-on`.
        public var name: String { self == .stop ? "stop" : "go-on" }
    }

    public var root: Node
    public var onFailure: FailurePolicy = .stop
    /// How long the flow's outcome, and its steps', are kept after it ended.
    public var retentionMilliseconds: UInt64 = 86_400_000
    /// A second submit with the same key, while the first flow is kept, returns the first flow.
    public var idempotencyKey: String?

    public static let version: UInt8 = 1
    /// The most steps a flow has: a larger one is refused whole.
    public static let maxSteps = 10_000
    /// The deepest nesting of chains, groups and batches.
    public static let maxDepth = 32
    /// The service a flow's own record in the journal names: no worker serves it.
    public static let service = "mmi.flow"
    /// What the broker keys a flow's steps behind (``stepKey(flow:step:)``); a client's
    /// idempotency key may not start with it.
    public static let stepKeyPrefix = "sky.flow/"

    public init(_ root: Node, onFailure: FailurePolicy = .stop) {
        self.root = root
        self.onFailure = onFailure
    }

    /// The idempotency key of step `step` (counted in the order the tree is written, from 0) of
    /// the flow `flow`: a step is made once, whatever restarts.
    public static func stepKey(flow: JobID, step: Int) -> String {
        "\(stepKeyPrefix)\(flow)/\(step)"
    }

    /// The flow and the step a step key names; `nil` for any other key.
    public static func step(ofKey key: String) -> (flow: JobID, step: Int)? {
        guard key.hasPrefix(stepKeyPrefix) else { return nil }
        let rest = key.dropFirst(stepKeyPrefix.count)
        guard let slash = rest.firstIndex(of: "/"), let flow = JobID(String(rest[..<slash])),
            let step = Int(rest[rest.index(after: slash)...]), step >= 0
        else { return nil }
        return (flow, step)
    }

    /// Every step, in the order the tree is written (a step's number is its place here).
    public var steps: [JobSubmission] {
        var steps: [JobSubmission] = []
        func walk(_ node: Node) {
            switch node {
            case .step(let job): steps.append(job)
            case .chain(let parts), .group(let parts), .batch(let parts): parts.forEach(walk)
            }
        }
        walk(root)
        return steps
    }

    /// What is wrong with the flow, or `nil`: the checks the broker makes, so that a client
    /// names the mistake without a round trip.
    public var problem: String? {
        if let key = idempotencyKey {
            if key.utf8.count > JobSubmission.maxKeyLength {
                return "a flow's idempotency key is \(key.utf8.count) bytes, over \(JobSubmission.maxKeyLength)"
            }
            if key.hasPrefix("sky.") {
                return "idempotency keys starting with sky. are the broker's; use another key"
            }
        }
        if retentionMilliseconds == 0 { return "a flow's retention must be more than 0 ms" }
        var count = 0
        var found: String?
        func check(_ node: Node, first: Bool, depth: Int) {
            guard found == nil else { return }
            if depth > Self.maxDepth {
                found = "the flow nests chains, groups and batches deeper than \(Self.maxDepth)"
                return
            }
            switch node {
            case .step(let job):
                count += 1
                guard count <= Self.maxSteps else {
                    found = "the flow has more than \(Self.maxSteps) steps, the most a flow has; split it"
                    return
                }
                if let problem = WireFormat.nameProblem(job.service, what: "service name") {
                    found = "step \(count - 1): \(problem)"
                } else if job.service.hasPrefix(BrokerService.prefix) {
                    found = "step \(count - 1): a job cannot run the broker's own \(job.service)"
                } else if job.idempotencyKey != nil || job.keyHold != .kept || job.confirmWithinMilliseconds != 0 {
                    found =
                        "step \(count - 1): a step has no idempotency key, unique hold or confirmation bound of its own (the flow's are its steps')"
                } else if !first && !job.body.isEmpty {
                    found =
                        "step \(count - 1) (\(job.service)) takes the result before it as its task, so its body must be empty; got \(job.body.count) bytes"
                }
            case .chain(let parts):
                guard !parts.isEmpty else {
                    found = "a chain needs at least one part"
                    return
                }
                for (offset, part) in parts.enumerated() { check(part, first: first && offset == 0, depth: depth + 1) }
            case .group(let parts), .batch(let parts):
                guard !parts.isEmpty else {
                    found = "a group or batch needs at least one part"
                    return
                }
                for part in parts { check(part, first: first, depth: depth + 1) }
            }
        }
        check(root, first: true, depth: 0)
        return found
    }

    // MARK: Wire form

    public func encode() -> [UInt8] {
        var bytes: [UInt8] = [Self.version, onFailure.rawValue]
        WireFormat.append(retentionMilliseconds, to: &bytes)
        let key = Array((idempotencyKey ?? "").utf8.prefix(JobSubmission.maxKeyLength))
        bytes.append(UInt8(key.count))
        bytes += key
        func append(_ node: Node) {
            switch node {
            case .step(let job):
                bytes.append(0)
                let encoded = job.encode()
                WireFormat.append(UInt32(encoded.count), to: &bytes)
                bytes += encoded
            case .chain(let parts), .group(let parts), .batch(let parts):
                bytes.append(node.kind)
                WireFormat.append(UInt32(parts.count), to: &bytes)
                parts.forEach(append)
            }
        }
        append(root)
        return bytes
    }

    /// Decodes and checks a flow: every field, every rule of ``problem``.
    public init(decoding bytes: [UInt8]) throws(ProtocolError) {
        var reader = ByteReader(bytes)
        let version = try reader.byte("flow version")
        guard version == Self.version else {
            throw .invalidValue(name: "flow version", reason: "\(version); this broker reads version \(Self.version)")
        }
        let policyByte = try reader.byte("flow on-failure")
        guard let policy = FailurePolicy(rawValue: policyByte) else {
            throw .invalidValue(name: "flow on-failure", reason: "\(policyByte); 0 (stop) or 1 (go on)")
        }
        let retention = try reader.uint64("flow retention")
        let keyBytes = try reader.take(Int(try reader.byte("flow key length")), "flow key")
        guard let key = String(validating: keyBytes, as: UTF8.self) else {
            throw .invalidValue(name: "flow key", reason: "not UTF-8")
        }
        var steps = 0
        func node(depth: Int) throws(ProtocolError) -> Node {
            guard depth <= Self.maxDepth else {
                throw .invalidValue(
                    name: "flow", reason: "it nests chains, groups and batches deeper than \(Self.maxDepth)")
            }
            let kind = try reader.byte("flow node kind")
            if kind == 0 {
                steps += 1
                guard steps <= Self.maxSteps else {
                    throw .invalidValue(
                        name: "flow", reason: "it has more than \(Self.maxSteps) steps, the most a flow has; split it")
                }
                let step = "step \(steps - 1)"
                let length = Int(try reader.uint32("\(step)'s length"))
                let submission = try reader.take(length, step)
                guard let version = submission.first else {
                    throw .invalidValue(name: step, reason: "its job submission is empty (length 0)")
                }
                guard version == JobSubmission.version || version == JobSubmission.newestVersion else {
                    throw .invalidValue(
                        name: step,
                        reason:
                            "a step's submission is version \(JobSubmission.version), or \(JobSubmission.newestVersion) with a concurrency key; got \(version)"
                    )
                }
                let decoded: JobSubmission
                do {
                    decoded = try JobSubmission(decoding: submission)
                } catch {
                    throw .invalidValue(name: step, reason: "its job submission: \(error)")
                }
                guard decoded.confirmWithinMilliseconds == 0, decoded.keyHold == .kept else {
                    throw .invalidValue(
                        name: step, reason: "a confirmation bound or a key hold, which a step does not take")
                }
                return .step(decoded)
            }
            guard (1...3).contains(kind) else {
                throw .invalidValue(name: "flow node kind", reason: "\(kind); 0 step, 1 chain, 2 group, 3 batch")
            }
            let count = Int(try reader.uint32("part count"))
            guard count <= Self.maxSteps else {
                throw .invalidValue(
                    name: "flow", reason: "it has more than \(Self.maxSteps) steps, the most a flow has; split it")
            }
            var parts: [Node] = []
            parts.reserveCapacity(count)
            for _ in 0..<count { parts.append(try node(depth: depth + 1)) }
            switch kind {
            case 1: return .chain(parts)
            case 2: return .group(parts)
            default: return .batch(parts)
            }
        }
        var spec = FlowSpec(try node(depth: 0), onFailure: policy)
        let rest = reader.rest()
        guard rest.isEmpty else {
            throw .invalidValue(name: "flow", reason: "\(rest.count) bytes after its last step")
        }
        spec.retentionMilliseconds = retention
        spec.idempotencyKey = key.isEmpty ? nil : key
        if let problem = spec.problem { throw .invalidValue(name: "flow", reason: problem) }
        self = spec
    }
}

extension FlowSpec.Node {
    /// The kind byte of the wire form.
    var kind: UInt8 {
        switch self {
        case .step: 0
        case .chain: 1
        case .group: 2
        case .batch: 3
        }
    }
}
