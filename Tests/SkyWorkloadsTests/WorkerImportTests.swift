// Only the worker kit: what a worker's file names must come with it (a newcomer's chord
// completion task did not compile: `FlowResultsTask` was the client's alone).
import SkyWorkerKit
import Testing

/// A chord's completion step, as docs/jobs.md ("Flows") writes it for a worker.
private struct Total: FlowResultsTask {
    static let service = "test.total"
    typealias Result = Int
    var results: [Int]
}

/// A batch's completion step, as docs/jobs.md writes it.
private struct Tally: FlowBatchTask {
    static let service = "test.tally"
    typealias Result = String
    var counts: BatchCounts
}

@Suite("What a worker's one import brings")
struct WorkerImportTests {
    @Test func aWorkerServesAFlowsCompletionStepsWithTheWorkerKitAlone() async throws {
        let system = ScanSystem(name: "imports", capacity: 1)
        await system.register(Total.self) { $0.results.reduce(0, +) }
        await system.register(Tally.self) { "\($0.counts.succeeded) of \($0.counts.succeeded + $0.counts.failed)" }
        #expect(await system.services == [Tally.service, Total.service])
        // A group's results travel as their JSON array, a batch's counts as an object.
        let total = try JSONTaskCoder().decode(Total.self, from: Array("[1,2,3]".utf8))
        #expect(total.results == [1, 2, 3])
        let counts = BatchCounts(succeeded: 2, failed: 1, cancelled: 0)
        let tally = try JSONTaskCoder().decode(Tally.self, from: try JSONTaskCoder().encode(counts))
        #expect(tally.counts == counts)
    }
}
