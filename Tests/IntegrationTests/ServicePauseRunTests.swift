import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Paused services on a real broker with a real SQLite journal, operated with skyctl: a
    /// paused service starts nothing for 5 s while another runs, the pause survives `kill -9`,
    /// and a resume starts the backlog.
    @Suite("Paused services: skyctl, 5 s of nothing, kill -9, resume")
    struct ServicePauseRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        @Test(.timeLimit(.minutes(2)))
        func aPausedServiceStartsNothingSurvivesAKillAndAResumeStartsItsBacklog() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(
                name: "w1", capacity: 4, extraArguments: ["--workloads", "sky.sleep,sky.echo"])
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", ["services"] + arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            let paused = try await skyctl(["pause", SleepTask.service])
            #expect(paused.status == 0 && paused.out.first?.hasPrefix("paused sky.sleep") == true, "\(paused)")
            let refused = try await skyctl(["pause", "mmi.workers"])
            #expect(refused.status != 0 && refused.err.contains("broker's own"), "\(refused)")

            let sky = try await SkyClient(broker: cluster.clients)
            let jobs = try await (0..<5).asyncMap { tag in
                try await sky.submit(SleepTask(milliseconds: 10, tag: tag)).id
            }
            // A call of the paused service waits, and is answered at its deadline saying why (a
            // peer's own deadline: Sky's client ends the call by its own timer first).
            let peer = try await RawPeer(connectingTo: cluster.clients)
            let started = ContinuousClock.now
            let call = RequestID(high: 0x5e, low: 1)
            peer.send(
                ClientToBroker.request(
                    TaskRequest(
                        requestID: call, service: SleepTask.service,
                        header: RequestHeader(timeoutMilliseconds: 5000),
                        body: Array(#"{"milliseconds":10,"tag":99}"#.utf8))
                ).encode())
            let answer = try #require(try await peer.waitForReplies(1, timeout: .seconds(20)).first)
            #expect(ContinuousClock.now - started >= .seconds(5))
            #expect(answer.status == .deadlineExceeded)
            #expect(RemoteErrorBody(decoding: answer.body).message.contains("the service sky.sleep is paused"))
            await peer.close()
            // Meanwhile another service runs.
            #expect(try await sky.scan(EchoTask(message: "others run")).message == "others run")
            for id in jobs { #expect(try await sky.status(of: id) == .queued) }
            let listed = try await skyctl(["list"])
            #expect(listed.out.contains { $0.hasPrefix("sky.sleep") && $0.contains("paused") }, "\(listed)")

            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await cluster.waitForWorkers(1)
            let again = try await SkyClient(broker: cluster.clients)
            #expect(try await again.services().first { $0.name == SleepTask.service }?.paused == true)
            #expect(try await again.scan(EchoTask(message: "after")).message == "after")
            for id in jobs { #expect(try await again.status(of: id) == .queued, "still waiting after the restart") }

            let resumed = try await skyctl(["resume", SleepTask.service])
            #expect(resumed.status == 0, "\(resumed)")
            for (tag, id) in jobs.enumerated() {
                #expect(try await again.result(of: id, as: SleepTask.self).tag == tag)
            }
            await sky.close()
            await again.close()
            await cluster.stop()
        }
    }
}

extension Sequence where Element: Sendable {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var all: [T] = []
        for element in self { all.append(try await transform(element)) }
        return all
    }
}
