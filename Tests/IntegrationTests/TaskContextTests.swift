import Foundation
import Logging
import Sky
import SkyBrokerKit
import SkyTestSupport
import SkyWorkerKit
import Testing

/// A task whose handler answers with the `TaskContext` it was given.
struct ContextProbe: SkyTask {
    static let service = "test.context"
    typealias Result = SeenContext
    var note = ""
}

struct SeenContext: Codable, Sendable {
    var service: String
    var attempt: Int
    var requestID: String
    var jobID: String
    /// Milliseconds from the handler's start to its deadline, if it has one.
    var deadlineAhead: Int?
    /// The request id in the context's logger's metadata, and the logger's label.
    var loggedRequest: String?
    var loggerLabel: String
}

extension InProcessSuite {
    /// A handler's `TaskContext`, with a real broker between caller and worker: for a call (with
    /// its timeout) and for a durable job (named by its job id).
    @Suite("A handler's context")
    struct TaskContextTests {
        static func register(on system: ScanSystem) async {
            await system.registerWithContext(ContextProbe.self) { _, context in
                let deadlineAhead = context.deadline.map { deadline in
                    let ahead = ContinuousClock.now.duration(to: deadline)
                    return Int(ahead.components.seconds * 1000 + ahead.components.attoseconds / 1_000_000_000_000_000)
                }
                return SeenContext(
                    service: context.service, attempt: context.attempt, requestID: context.requestID,
                    jobID: context.jobID, deadlineAhead: deadlineAhead,
                    loggedRequest: context.logger[metadataKey: "sky.request_id"].map { "\($0)" },
                    loggerLabel: context.logger.label)
            }
        }

        @Test func aHandlerKnowsItsAttemptIdDeadlineAndLoggerForACallAndForAJob() async throws {
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("sky-context-\(UUID())")
            defer { try? FileManager.default.removeItem(at: state) }
            let cluster = try await InProcessCluster.start { $0.stateDirectory = state.path }
            let system = ScanSystem(name: "context", capacity: 2)
            await Self.register(on: system)
            try await cluster.startWorker(system, logger: Logger(label: "context-test"))
            let sky = try await SkyClient(broker: cluster.clients)

            let call = try await sky.scan(ContextProbe(), options: ScanOptions(timeout: .seconds(5)))
            #expect(call.service == ContextProbe.service && call.attempt == 1)
            #expect(call.requestID.count == 32 && call.loggedRequest == call.requestID)
            #expect(call.loggerLabel == "context-test", "the worker's own logger")
            let ahead = try #require(call.deadlineAhead, "a call with a timeout has a deadline")
            #expect(ahead > 0 && ahead <= 5000, "\(ahead) ms")

            let job = try await sky.submit(ContextProbe())
            let ran = try await job.value
            #expect(ran.jobID == job.id.description, "a job's attempt is named by its job's id")
            #expect(ran.attempt == 1 && ran.deadlineAhead == nil, "a job without a timeout has no deadline")
            await sky.close()
            await cluster.stop()
        }

        /// The client's local fallback runs handlers with a context too: the call's timeout
        /// reaches the handler's deadline, and the logger is one labelled `sky.task`.
        @Test func theLocalFallbackGivesHandlersTheirContext() async throws {
            let system = ScanSystem(name: "local", capacity: 1)
            await Self.register(on: system)
            var configuration = SkyClient.Configuration()
            configuration.localFallback = system
            configuration.localFallbackWait = .milliseconds(100)
            let sky = try await SkyClient(broker: try await unusedEndpoint(), configuration: configuration)
            let seen = try await sky.scan(ContextProbe(), options: ScanOptions(timeout: .seconds(5)))
            #expect(seen.service == ContextProbe.service && seen.attempt == 1)
            #expect(seen.requestID.count == 32 && seen.loggedRequest == seen.requestID)
            #expect(seen.loggerLabel == "sky.task")
            let ahead = try #require(seen.deadlineAhead, "the call's timeout reaches the local handler")
            #expect(ahead > 0 && ahead <= 5000, "\(ahead) ms")
            #expect(await sky.statistics.localRuns == 1)
            await sky.close()
        }
    }
}
