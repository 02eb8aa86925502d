import Foundation
import SkyProtocol
import SkyTestSupport
import Testing

extension SecondLineSuite {
    @Suite("Several hosts: network namespaces on one bridge")
    struct MultiHostTests {
        @Test(
            "A worker whose link goes down is dropped, its tasks finish elsewhere, and it comes back",
            .enabled(if: NetworkLab.available, Comment(rawValue: NetworkLab.unavailableReason)))
        func aWorkerCutOffFromTheNetworkIsReplacedAndReturns() async throws {
            let lab = try NetworkLab()
            defer { lab.deleteAll() }
            // Host 1: the broker; hosts 2 and 3: a worker each; host 4: the clients.
            let (brokerHost, firstHost, secondHost, clientHost) = (
                try lab.addHost(1), try lab.addHost(2), try lab.addHost(3), try lab.addHost(4)
            )
            let broker = NetworkLab.address(1)
            let heartbeats = ["--heartbeat-interval", "0.5", "--liveness", "3"]
            let interval = Duration.milliseconds(500)
            let expiry = interval * 3
            var processes: [SkyProcess] = []
            defer { for process in processes { process.killNow() } }

            let brokerProcess = try await StartedBroker.start(
                clients: "tcp://\(broker):5555", workers: "tcp://\(broker):5556", events: "tcp://\(broker):5557",
                arguments: heartbeats, namespace: brokerHost
            ).process
            processes.append(brokerProcess)
            let watch = try SkyProcess(
                "skywatch", ["--broker", "tcp://\(broker):5555", "--events", "tcp://\(broker):5557", "--json"],
                namespace: clientHost)
            processes.append(watch)
            try await watch.waitForLine { $0.hasPrefix(#"{"snapshot":"#) }
            for (name, host) in [("far-1", firstHost), ("far-2", secondHost)] {
                let worker = try SkyProcess(
                    "skyworker", ["--broker", "tcp://\(broker):5556", "--name", name, "--capacity", "2"] + heartbeats,
                    name: name, namespace: host)
                processes.append(worker)
            }
            // Both names seen: on a loaded machine a worker may be expired and connect again
            // before this looks, and a count of exactly two would then never hold.
            let joined: [SkyEvent]
            do {
                joined = try await watch.waitForEvents {
                    Set($0.filter { $0.event == .workerConnected }.compactMap { $0.worker?.name }) == [
                        "far-1", "far-2",
                    ]
                }
            } catch {
                let watched = watch.outputLines.suffix(20).joined(separator: "\n")
                let errors = processes.map { "--- \($0.name) (running: \($0.isRunning))\n\($0.errorText)" }
                Issue.record("\(error)\nskywatch:\n\(watched)\n\(errors.joined(separator: "\n"))")
                return
            }
            let hosts = Dictionary(
                joined.compactMap { $0.worker }.map { ($0.name, $0.host ?? "?") }, uniquingKeysWith: { $1 })
            #expect(
                hosts == ["far-1": NetworkLab.address(2), "far-2": NetworkLab.address(3)], "the broker sees each host")

            // Scans from the client host, across the bridge, with every result checked.
            let scan = try SkyProcess(
                "skyscan",
                [
                    "--broker", "tcp://\(broker):5555", "--sectors", "800", "--size", "256", "--concurrency", "8",
                    "--verify", "--json",
                ], namespace: clientHost)
            processes.append(scan)
            // The worker about to be cut off must be busy. On a loaded machine the verifying
            // client keeps fewer calls out (one fresh-clone run under stress-ng --cpu 2 saw one
            // task in flight in every second for 20 s, never both workers busy at once): wait
            // longer, and only for the worker that matters.
            try await watch.waitForEvents(timeout: .seconds(60)) { events in
                events.contains {
                    ($0.stats?.completed ?? 0) >= 100
                        && ($0.workers ?? []).contains { $0.name == "far-1" && ($0.inFlight ?? 0) > 0 }
                }
            }

            // Cut host 2 off for 3 × the expiry.
            try lab.setLink(of: 2, up: false)
            let cutAt = Date()
            let dropped = try await watch.waitForEvents(timeout: .seconds(10)) {
                $0.contains { $0.event == .workerDisconnected && $0.worker?.name == "far-1" }
            }.first { $0.event == .workerDisconnected }
            // From the broker's own event time, not from when skywatch's line was read.
            let detection = try #require(dropped).published(after: cutAt)
            let remaining = expiry * 3 - detection
            if remaining > .zero { try await Task.sleep(for: remaining) }  // the fault: the link stays down
            try lab.setLink(of: 2, up: true)
            let restoredAt = Date()

            let rejoined = try await watch.waitForEvents(timeout: .seconds(30)) {
                $0.filter { $0.event == .workerConnected && $0.worker?.name == "far-1" }.count == 2
            }.last { $0.event == .workerConnected && $0.worker?.name == "far-1" }
            let back = try #require(rejoined).published(after: restoredAt)
            #expect(try await scan.waitForExit(timeout: .seconds(120)) == 0, "\(scan.outputLines)\n\(scan.errorText)")
            let summary =
                try JSONSerialization.jsonObject(with: Data((scan.outputLines.last ?? "{}").utf8)) as? [String: Any]
            let completed = summary?["completed"] as? Int
            let failed = summary?["failed"] as? Int
            let mismatches = summary?["mismatches"] as? Int
            #expect(completed == 800 && failed == 0 && mismatches == 0, "\(summary ?? [:])")
            #expect(dropped?.reason == .expired)
            // The worker's last message came at most one heartbeat interval before the cut, and
            // the broker checks expiry every tenth of an interval: it is dropped between
            // expiry - interval and expiry + a tick, plus 200 ms for the broker thread's
            // scheduling on a loaded machine.
            let earliest: Duration = expiry - interval - .milliseconds(10)
            let latest: Duration = expiry + interval / 10 + .milliseconds(200)
            #expect(detection >= earliest, "dropped after \(detection)")
            #expect(detection <= latest, "dropped after \(detection)")
            // Back within the worker's reconnect backoff (1 s ± 20 %, doubling) plus libzmq's
            // reconnect interval (at most 4 s).
            #expect(back < .seconds(6), "registered again \(back) after the link came back")
            #expect((dropped?.tasksHeld ?? 0) > 0, "it held tasks when it was cut off")
            print(
                "multi-host: link of far-1 down for \(expiry * 3); dropped after \(detection) "
                    + "(reason \(dropped?.reason?.rawValue ?? "?"), \(dropped?.tasksHeld ?? 0) tasks requeued); "
                    + "registered again \(back) after the link came back; skyscan: \(completed ?? 0) completed, "
                    + "\(failed ?? -1) failed, \(mismatches ?? -1) mismatches")

            for process in processes.reversed() {
                process.signal(SIGTERM)
                _ = try? await process.waitForExit(timeout: .seconds(10))
            }
        }
    }
}
