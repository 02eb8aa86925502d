import Sky
import SkyProtocol
import Testing

/// The typed flow builder: what it sends, and what it refuses before sending.
@Suite("Flow builder: the tree it makes and the mistakes it refuses")
struct FlowBuilderTests {
    struct Resize: SkyTask {
        static let service = "images.resize"
        typealias Result = Compress
        var url: String
    }

    struct Compress: SkyTask {
        static let service = "images.compress"
        typealias Result = String
        var path: String
    }

    struct Summarize: FlowResultsTask {
        static let service = "images.summarize"
        typealias Result = Int
        var results: [String]
    }

    @Test func aChainOfThensIsOneChainWhoseLaterStepsTakeTheirInput() throws {
        let spec = try Flow(Resize(url: "a")).then(Compress.self).spec()
        guard case .chain(let parts) = spec.root, parts.count == 2, case .step(let first) = parts[0],
            case .step(let second) = parts[1]
        else {
            Issue.record("\(spec.root)")
            return
        }
        #expect(first.service == Resize.service && first.body == Array(#"{"url":"a"}"#.utf8))
        #expect(second.service == Compress.service && second.body.isEmpty)
        #expect(spec.problem == nil)
    }

    struct Again: SkyTask {
        static let service = "again"
        typealias Result = Again
    }

    /// A chain past the broker's bound is refused as it grows, not built to 100,000 steps (two
    /// minutes in a debug build) to be refused at submit.
    @Test func aChainPastTheStepBoundIsRefusedAsItGrows() throws {
        var flow = try Flow(Again())
        for _ in 1..<FlowSpec.maxSteps { flow = try flow.then(Again.self) }
        #expect(flow.spec().problem == nil)
        #expect(throws: SkyError.self) { _ = try flow.then(Again.self) }
    }

    @Test func aChordIsAChainOfAGroupAndItsCallback() throws {
        let parts = try ["a", "b"].map { try Flow(Resize(url: $0)).then(Compress.self) }
        let spec = try Flow(group: parts).then(Summarize.self).spec(
            options: FlowOptions(onFailure: .goOn, retention: .seconds(60), idempotencyKey: "k"))
        guard case .chain(let outer) = spec.root, outer.count == 2, case .group(let members) = outer[0] else {
            Issue.record("\(spec.root)")
            return
        }
        #expect(members.count == 2 && spec.steps.count == 5)
        #expect(spec.onFailure == .goOn && spec.retentionMilliseconds == 60_000 && spec.idempotencyKey == "k")
        #expect(spec.problem == nil)
    }

    @Test func emptyGroupsAndStepsWithKeysAreRefusedBeforeAnythingIsSent() throws {
        #expect(throws: SkyError.self) { _ = try Flow<[String]>(group: [Flow<String>]()) }
        #expect(throws: SkyError.self) { _ = try Flow(batch: [Resize]()) }
        #expect(throws: SkyError.self) {
            _ = try Flow(Resize(url: "a"), options: JobOptions(idempotencyKey: "mine"))
        }
    }
}
