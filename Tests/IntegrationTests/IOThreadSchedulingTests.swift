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
        @Test func theBrokerWorkerAndClientIOThreadsRunUnderSchedBatch() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let worker = try await cluster.startWorker(name: "batch-worker")
            #expect(try ThreadPolicy.of(threadNamed: "skybroker-io", in: cluster.broker.pid) == 3)
            // libzmq's I/O thread starts from the loop's thread, and inherits the policy.
            try await Self.awaitLibzmqsIOThread(in: cluster.broker.pid)
            #expect(try ThreadPolicy.of(threadNamed: "ZMQbg/IO/0", in: cluster.broker.pid) == 3)
            #expect(try ThreadPolicy.of(threadNamed: "skyworker-io", in: worker.pid) == 3)
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.request(service: "sky.echo", body: [1])
            #expect(try ThreadPolicy.of(threadNamed: "skyclient-io", in: getpid()) == 3)
            await sky.close()
        }

        @Test func theEnvironmentCanKeepTheKernelsDefaultPolicy() async throws {
            let broker = try await StartedBroker.start(
                environment: [ZMQEventLoop.Scheduling.environmentVariable: "normal"])
            defer { broker.process.killNow() }
            #expect(try ThreadPolicy.of(threadNamed: "skybroker-io", in: broker.process.pid) == 0)
            try await Self.awaitLibzmqsIOThread(in: broker.process.pid)
            #expect(try ThreadPolicy.of(threadNamed: "ZMQbg/IO/0", in: broker.process.pid) == 0)
        }

        /// libzmq's I/O thread names itself when it first runs, which can be after the broker
        /// said it was ready (a bind only hands the listener to that thread): on a loaded
        /// machine the name was not there yet, once in ten fresh-clone runs.
        static func awaitLibzmqsIOThread(in process: Int32) async throws {
            try await eventually("libzmq's I/O thread has its name") {
                try ThreadPolicy.of(threadNamed: "ZMQbg/IO/0", in: process) != nil
            }
        }
    }
}
