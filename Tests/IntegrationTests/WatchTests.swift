import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import Testing

extension IntegrationSuite {
    @Suite("skywatch: snapshot plus events, waiting for workers, an absent broker")
    struct WatchTests {
        static func watch(_ cluster: TestCluster, _ arguments: [String]) throws -> SkyProcess {
            cluster.track(
                try SkyProcess("skywatch", ["--broker", cluster.clients, "--events", cluster.events] + arguments))
        }

        @Test func waitWorkersExitsZeroOnceEnoughWorkersAreConnectedAndOneOnTimeout() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let waiting = try Self.watch(cluster, ["--wait-workers", "2", "--timeout", "20"])
            _ = try await cluster.startWorker(name: "one", capacity: 1)
            #expect(waiting.isRunning, "one worker is not enough")
            _ = try await cluster.startWorker(name: "two", capacity: 1)
            #expect(try await waiting.waitForExit() == 0)

            let impatient = try Self.watch(cluster, ["--wait-workers", "3", "--timeout", "1"])
            #expect(try await impatient.waitForExit() == 1)
            #expect(impatient.errorText.contains("timed out after 1.0 s with 2 worker(s) connected"))
            await cluster.stop()
        }

        @Test func withoutABrokerItSaysSoAndShowsTheClusterOnceTheBrokerStarts() async throws {
            let (clients, workers, events) = (
                try await unusedEndpoint(), try await unusedEndpoint(), try await unusedEndpoint()
            )
            let watch = try SkyProcess("skywatch", ["--broker", clients, "--events", events, "--json"])
            defer { watch.killNow() }
            try await watch.waitForLine(onStandardError: true) {
                $0.contains("no answer from the broker at \(clients)")
            }
            #expect(watch.isRunning)
            let broker = try SkyProcess("skybroker", ["--clients", clients, "--workers", workers, "--events", events])
            defer { broker.killNow() }
            let line = try await watch.waitForLine(timeout: .seconds(20)) { $0.hasPrefix(#"{"snapshot":"#) }
            let snapshot = try JSONDecoder().decode(SnapshotLine.self, from: Data(line.utf8)).snapshot
            #expect(snapshot.workers.isEmpty)
            watch.signal(SIGTERM)
            #expect(try await watch.waitForExit() == 0)
            let table = try JSONDecoder().decode(TableLine.self, from: Data(watch.outputLines.last!.utf8))
            #expect(table.table.isEmpty)
            broker.signal(SIGTERM)
            _ = try await broker.waitForExit()
        }
    }
}
