import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyZMQ
import Testing

extension SecondLineSuite {
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

        /// `skywatch --json | head -n 1`: once `head` is gone, skywatch's next line ends it with
        /// status 0, as a Unix filter ends. Foundation's FileHandle.write trapped on the broken
        /// pipe ('try!' ... "Broken pipe", a crash with a backtrace).
        @Test func aReaderThatGoesAwayEndsSkywatchQuietly() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let skywatch = SkyProcess.binaries.appendingPathComponent("skywatch").path
            let pipeline = cluster.track(
                try SkyProcess(
                    program: URL(fileURLWithPath: "/bin/bash"),
                    [
                        "-c", "set -o pipefail; \"$0\" --broker \"$1\" --events \"$2\" --json | head -n 1", skywatch,
                        cluster.clients, cluster.events,
                    ], name: "skywatch | head"))
            // The snapshot is the one line; the broker's stats, a second later, meet the closed pipe.
            #expect(try await pipeline.waitForExit(timeout: .seconds(15)) == 0, "\(pipeline.errorText)")
            #expect(pipeline.outputLines.count == 1 && pipeline.outputLines[0].hasPrefix("{\"snapshot\""))
            #expect(!pipeline.errorText.contains("Fatal error"), "\(pipeline.errorText)")
            await cluster.stop()
        }

        @Test func withoutABrokerItSaysSoAndShowsTheClusterOnceTheBrokerStarts() async throws {
            let (clients, workers, events) = (
                try await unusedEndpoint(), try await unusedEndpoint(), try await unusedEndpoint()
            )
            let watch = try SkyProcess("skywatch", ["--broker", clients, "--events", events, "--json"])
            defer { watch.killNow() }
            try await watch.waitForLine(onStandardError: true) {
                $0.contains("no answer from the broker at \(clients) (events \(events)) yet")
            }
            #expect(watch.isRunning)
            let broker = try SkyProcess(
                "skybroker", ["--clients", clients, "--workers", workers, "--events", events, "--state-dir", "none"])
            defer { broker.killNow() }
            let line = try await watch.waitForLine(timeout: .seconds(20)) { $0.hasPrefix(#"{"snapshot":"#) }
            let snapshot = try JSONDecoder().decode(SnapshotLine.self, from: Data(line.utf8)).snapshot
            #expect(snapshot.workers.isEmpty)
            watch.signal(SIGTERM)
            #expect(try await watch.waitForExit() == 0)
            // A stop is not a problem: nothing about the cancelled event stream on stderr.
            #expect(!watch.errorText.contains("CancellationError"), "\(watch.errorText)")
            let table = try JSONDecoder().decode(TableLine.self, from: Data(watch.outputLines.last!.utf8))
            #expect(table.table.isEmpty)
            broker.signal(SIGTERM)
            _ = try await broker.waitForExit()
        }
        /// skywatch takes a new snapshot when event numbers jump (events were lost on the way),
        /// and not otherwise: a scripted broker (a ROUTER answering `mmi.workers`, a PUB
        /// publishing numbered events) sends 1, 2, then 5.
        @Test func aGapInEventNumbersMakesSkywatchTakeANewSnapshot() async throws {
            let clients = try await FakeBroker.start()
            defer { Task { await clients.stop() } }
            let snapshots = Locked(0)
            let answering = Task {
                while !Task.isCancelled {
                    let received = await clients.nextRequest()
                    guard let request = received.request, request.service == BrokerService.workers else { continue }
                    let seq = UInt64(
                        snapshots.withLock { count -> Int in
                            count += 1
                            return count == 1 ? 1 : 5
                        })
                    let snapshot = ClusterSnapshot(
                        seq: seq, workers: [], queued: [:], inFlight: 0, counters: BrokerCounters(), broker: "fake")
                    let body = try JSONEncoder().encode(snapshot)
                    clients.reply(
                        to: received.peer, TaskReply(requestID: request.requestID, status: .ok, body: Array(body)))
                }
            }
            defer { answering.cancel() }
            let publisher = ZMQEventLoop.SocketID(0, name: "fake-events")
            let events = try await ZMQEventLoop.start(
                name: "fake-events", sockets: [.init(id: publisher, type: .pub, bind: ["tcp://127.0.0.1:*"])])
            defer { Task { await events.shutdown() } }
            let eventsEndpoint = try #require(events.boundEndpoints(of: publisher).first)
            func publish(_ seq: UInt64, _ kind: EventKind) {
                let worker = WorkerInfo(id: "w\(seq)", name: "w\(seq)", capacity: 1, services: ["svc"])
                let event = SkyEvent(
                    seq: seq, event: kind, time: SkyEvent.timestamp(), worker: kind == .brokerHello ? nil : worker,
                    broker: "fake")
                events.send(event.encodeFrames(), on: publisher)
            }
            let watch = try SkyProcess(
                "skywatch", ["--broker", clients.endpoint, "--events", eventsEndpoint, "--json"])
            defer { watch.killNow() }
            // A PUB drops what it sends before the subscription arrives: greet until it is live.
            try await eventually("skywatch took its first snapshot") {
                publish(1, .brokerHello)
                return snapshots.withLock { $0 } == 1
            }
            publish(2, .workerConnected)
            try await watch.waitForLine { $0.contains(#""seq":2"#) }
            #expect(snapshots.withLock { $0 } == 1, "consecutive numbers need no new snapshot")
            publish(5, .workerConnected)
            try await eventually("a second snapshot after the gap") { snapshots.withLock { $0 } == 2 }
            let printed = try await watch.waitUntil { $0.filter { $0.hasPrefix(#"{"snapshot":"#) }.count == 2 }
            #expect(printed.filter { $0.hasPrefix(#"{"snapshot":"#) }.count == 2)
        }
    }
}
