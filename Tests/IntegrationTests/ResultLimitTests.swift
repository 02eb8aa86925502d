import Foundation
import Logging
import Sky
import SkyProtocol
import SkyTasks
import SkyTestSupport
import SkyWorkerKit
import Testing

extension IntegrationSuite {
    @Suite("Results over the broker's frame limit")
    struct ResultLimitTests {
        /// A handler whose result is larger than the broker's `--max-frame-size`: the worker
        /// answers that task with a failure naming both sizes instead of sending it. Before, the
        /// broker's libzmq closed the worker's connection, the task went to the worker again
        /// (measured: 4 requeues, 1 workerLost) and after 4.2 s the caller was told that no
        /// worker serves the service. The worker stays registered and serves on.
        @Test func aResultOverTheLimitFailsTheCallNamingTheLimitAndTheWorkerServesOn() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--max-frame-size", "65536"])
            defer { cluster.killAll() }
            let system = ScanSystem(name: "big", capacity: 2)
            // The body's first byte says how many kilobytes to return.
            await system.registerRaw(service: "big") { body in [UInt8](repeating: 1, count: Int(body.first ?? 0) * 1000)
            }
            let worker = SkyWorker(
                configuration: .init(broker: cluster.workers), system: system, logger: Logger(label: "big"))
            let running = Task { try await worker.run() }
            defer { running.cancel() }
            let sky = try await SkyClient(broker: cluster.clients)
            #expect(try await sky.request(service: "big", body: [60]).count == 60_000)

            let started = ContinuousClock.now
            do {
                _ = try await sky.request(service: "big", body: [100], options: ScanOptions(timeout: .seconds(5)))
                Issue.record("a result over the broker's limit was delivered")
            } catch let error as SkyError {
                guard case .remote(let type, let message) = error else {
                    Issue.record("expected the worker's failure, got \(error)")
                    return
                }
                #expect(type == RemoteErrorBody.resultTooLargeType)
                #expect(message.contains("100000 bytes") && message.contains("at most 65536"), "\(message)")
            }
            let failedAfter = ContinuousClock.now - started
            print("result limit: a 100 KB result against a 64 KiB broker failed in \(failedAfter)")
            #expect(failedAfter < .seconds(1))

            #expect(try await sky.request(service: "big", body: [10]).count == 10_000)
            let snapshot = try await sky.clusterSnapshot()
            #expect(snapshot.counters.requeued == 0)
            #expect(snapshot.counters.failedWorkerLost == 0)
            #expect(snapshot.workers.map(\.name) == ["big"])
            await sky.close()
            running.cancel()
            await cluster.stop()
        }
    }
}
