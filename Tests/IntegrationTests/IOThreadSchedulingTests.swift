import Foundation
import Sky
import SkyTestSupport
import SkyZMQ
import Testing

extension IntegrationSuite {
    /// Every role's I/O thread runs under `SCHED_BATCH` (``ZMQEventLoop/Scheduling``), as the
    /// kernel shows it in /proc, and `SKY_IO_THREAD_SCHEDULING=normal` keeps the default policy.
    @Suite("I/O thread scheduling")
    struct IOThreadSchedulingTests {
        /// The kernel's policy of the thread of process `pid` named `name` (3 is `SCHED_BATCH`,
        /// 0 `SCHED_OTHER`); `nil` when there is no such thread.
        static func policy(ofThreadNamed name: String, in pid: Int32) throws -> Int? {
            let tasks = "/proc/\(pid)/task"
            for thread in try FileManager.default.contentsOfDirectory(atPath: tasks) {
                let comm = try? String(contentsOfFile: "\(tasks)/\(thread)/comm", encoding: .utf8)
                guard comm?.trimmingCharacters(in: .whitespacesAndNewlines) == name else { continue }
                let sched = try String(contentsOfFile: "\(tasks)/\(thread)/sched", encoding: .utf8)
                let line = sched.split(separator: "\n").first { $0.hasPrefix("policy") }
                return line?.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            }
            return nil
        }

        @Test func theBrokerWorkerAndClientIOThreadsRunUnderSchedBatch() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(name: "batch-worker")
            #expect(try Self.policy(ofThreadNamed: "skybroker-io", in: cluster.broker.pid) == 3)
            #expect(try Self.policy(ofThreadNamed: "skyworker-io", in: worker.pid) == 3)
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.request(service: "sky.echo", body: [1])
            #expect(try Self.policy(ofThreadNamed: "skyclient-io", in: getpid()) == 3)
            await sky.close()
        }

        @Test func theEnvironmentCanKeepTheKernelsDefaultPolicy() async throws {
            let broker = try await StartedBroker.start(
                environment: [ZMQEventLoop.Scheduling.environmentVariable: "normal"])
            defer { broker.process.killNow() }
            #expect(try Self.policy(ofThreadNamed: "skybroker-io", in: broker.process.pid) == 0)
        }
    }
}
