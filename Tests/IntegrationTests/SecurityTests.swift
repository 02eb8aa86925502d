import Foundation
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Synchronization
import Testing

@testable import Sky

extension IntegrationSuite {
    @Suite("Security: CURVE, per-role allow-lists, refusals")
    struct SecurityTests {
        /// Key files for one test: the broker's, a client's, a worker's, a second worker's and an
        /// outsider's; the client and the two workers are on their roles' allow-lists.
        struct Keys {
            let directory: URL
            let broker: CurveKeyPair
            let client: CurveKeyPair
            let worker: CurveKeyPair
            let secondWorker: CurveKeyPair
            let outsider: CurveKeyPair

            init() throws {
                directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                    "sky-keys-\(UUID().uuidString)")
                for sub in ["clients", "workers"] {
                    try FileManager.default.createDirectory(
                        at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
                }
                let directory = directory
                func make(_ name: String, listedIn list: String?) throws -> CurveKeyPair {
                    let pair = try CurveKeyPair.generate()
                    _ = try CurveKeyFile.write(pair, name: name, directory: directory.path)
                    if let list {
                        try FileManager.default.copyItem(
                            at: directory.appendingPathComponent("\(name).pub"),
                            to: directory.appendingPathComponent("\(list)/\(name).pub"))
                    }
                    return pair
                }
                broker = try make("broker", listedIn: nil)
                client = try make("client", listedIn: "clients")
                worker = try make("worker", listedIn: "workers")
                secondWorker = try make("worker2", listedIn: "workers")
                outsider = try make("outsider", listedIn: nil)
            }

            func path(_ file: String) -> String { directory.appendingPathComponent(file).path }

            var brokerArguments: [String] {
                [
                    "--secret-key", path("broker.key"), "--client-keys", path("clients"), "--worker-keys",
                    path("workers"),
                ]
            }

            /// skyworker/skyscan flags for the key pair `name`.
            func peerArguments(_ name: String) -> [String] {
                ["--broker-key", path("broker.pub"), "--secret-key", path("\(name).key")]
            }

            func credentials(_ pair: CurveKeyPair, brokerKey: CurveKey? = nil) -> CurveCredentials {
                CurveCredentials(brokerKey: brokerKey ?? broker.publicKey, keys: pair)
            }

            func remove() { try? FileManager.default.removeItem(at: directory) }
        }

        static func client(_ cluster: TestCluster, _ credentials: CurveCredentials?) async throws -> SkyClient {
            var configuration = SkyClient.Configuration()
            configuration.credentials = credentials
            configuration.defaults = ScanOptions(timeout: .seconds(10), retry: RetryPolicy(maxAttempts: 1))
            return try await SkyClient(broker: cluster.clients, configuration: configuration)
        }

        @Test func keygenWritesASecretKeyOnlyItsOwnerMayReadAndNeverOverwrites() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "sky-keygen-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let keygen = try SkyProcess("skybroker", ["keygen", "--name", "node", "--directory", directory.path])
            #expect(try await keygen.waitForExit() == 0, "\(keygen.errorText)")
            let secretPath = directory.appendingPathComponent("node.key").path
            let attributes = try FileManager.default.attributesOfItem(atPath: secretPath)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
            let pair = try CurveKeyFile.readSecret(secretPath)
            #expect(try CurveKeyFile.readPublic(directory.appendingPathComponent("node.pub").path) == pair.publicKey)
            #expect(keygen.outputLines.last == pair.publicKey.z85)
            let again = try SkyProcess("skybroker", ["keygen", "--name", "node", "--directory", directory.path])
            #expect(try await again.waitForExit() != 0)
            #expect(again.errorText.contains("exists already"))
            #expect(try CurveKeyFile.readSecret(secretPath) == pair)
        }

        /// Known keys work; an unknown client key, a wrong broker key, a client without CURVE and
        /// a worker key on the client port are each refused with `unauthorized` within 2 s, the
        /// broker's application code sees none of their requests, and the refused clients do not
        /// come back. A client key on the worker port never registers.
        @Test func knownKeysAreServedAndEveryOtherKindIsRefused() async throws {
            let keys = try Keys()
            defer { keys.remove() }
            let cluster = try await TestCluster.start(extraArguments: keys.brokerArguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "trusted", extraArguments: keys.peerArguments("worker"))
            let good = try await Self.client(cluster, keys.credentials(keys.client))
            for sector in 0..<5 {
                let report = try await good.scan(ScanTask(sector: sector, size: 64))
                #expect(report == (try SectorScanner.scan(ScanTask(sector: sector, size: 64))))
            }
            let cases: [(String, CurveCredentials?)] = [
                ("unknown client key", keys.credentials(keys.outsider)),
                ("wrong broker key", keys.credentials(keys.client, brokerKey: keys.outsider.publicKey)),
                ("no CURVE (NULL mechanism)", nil),
                ("worker key on the client port", keys.credentials(keys.worker)),
            ]
            var refused: [SkyClient] = []
            for (name, credentials) in cases {
                let client = try await Self.client(cluster, credentials)
                refused.append(client)
                let started = ContinuousClock.now
                do {
                    _ = try await client.scan(ScanTask(sector: 1, size: 64))
                    Issue.record("\(name): the scan succeeded")
                } catch let error as SkyError {
                    let elapsed = ContinuousClock.now - started
                    print("security: \(name): \(error.code) after \(elapsed)")
                    #expect(error.code == .unauthorized, "\(name): \(error)")
                    #expect(elapsed < .seconds(2), "\(name): took \(elapsed)")
                }
                // Later calls fail at once, without another attempt.
                let attempts = await client.statistics.counters.attemptsSent
                let again = ContinuousClock.now
                let later = await #expect(throws: SkyError.self) {
                    _ = try await client.scan(ScanTask(sector: 2, size: 64))
                }
                #expect(later?.code == .unauthorized, "\(name): \(String(describing: later))")
                #expect(ContinuousClock.now - again < .milliseconds(100), "\(name): not at once")
                #expect(await client.statistics.counters.attemptsSent == attempts, "\(name): another attempt went out")
            }
            // A client key on the worker port: refused at the handshake, never registered.
            let before = try await good.clusterSnapshot().counters.handshakesDenied
            let impostor = try cluster.track(
                SkyProcess(
                    "skyworker", ["--broker", cluster.workers, "--name", "impostor"] + keys.peerArguments("client"),
                    name: "impostor"))
            try await eventually("the broker refuses the client key on its worker port") {
                try await good.clusterSnapshot().counters.handshakesDenied > before
            }
            // The worker learns it from the handshake and stops, naming the allow-list.
            #expect(try await impostor.waitForExit(timeout: .seconds(10)) == 1)
            #expect(impostor.errorText.contains("not on the broker's worker allow-list"), "\(impostor.errorText)")
            let snapshot = try await good.clusterSnapshot()
            #expect(snapshot.workers.map(\.name) == ["trusted"])
            #expect(snapshot.counters.requestsAccepted == 5, "only the good client's scans")
            // The refused clients stay refused: each closed its broker socket, which libzmq would
            // otherwise reconnect and handshake again.
            let denied = snapshot.counters.handshakesDenied
            try await eventually("every refused client closed its broker socket") {
                refused.allSatisfy { $0.shell.loop.load()?.openSockets.load(ordering: .relaxed) == 0 }
            }
            let later = try await good.clusterSnapshot().counters.handshakesDenied
            #expect(later == denied, "refused clients reconnected: \(denied) -> \(later)")
            for client in refused + [good] { await client.close() }
            await cluster.stop()
        }

        /// A worker registration belongs to its key. When the owner is gone and another peer
        /// (with a key that is itself on the worker list) takes over its routing id, that peer's
        /// messages are dropped unread, the registration ends instead of passing to it, and it
        /// is given nothing but the DISCONNECT that tells an unknown peer to register.
        @Test func aWorkerRegistrationBelongsToItsKey() async throws {
            let keys = try Keys()
            defer { keys.remove() }
            // Slow broker heartbeats: the broker's first heartbeat (at its first tick, a tenth of
            // the interval after it started) would find the owner gone and end its registration
            // as unreachable, before the impostor's first message on a loaded machine; this test
            // is about the impostor.
            let cluster = try await TestCluster.start(
                extraArguments: keys.brokerArguments + ["--heartbeat-interval", "600"])
            defer { cluster.killAll() }
            let good = try await Self.client(cluster, keys.credentials(keys.client))
            let routingID: [UInt8] = Array("worker-x".utf8)
            let owner = ZMQEventLoop.SocketID(1, name: "owner")
            let loop = try await ZMQEventLoop.start(
                name: "spoof-test",
                sockets: [
                    .init(
                        id: owner, type: .dealer,
                        options: [.routingID(routingID)] + keys.credentials(keys.worker).socketOptions,
                        connect: [cluster.workers])
                ])
            defer { loop.requestShutdown() }
            loop.send(
                WorkerToBroker.ready(WorkerAnnouncement(name: "owner", capacity: 1, services: ["sky.echo"])).encode(),
                on: owner)
            try await eventually("the owner registers") {
                try await good.clusterSnapshot().workers.map(\.name) == ["owner"]
            }
            // What reaches either socket, collected on the side.
            let impostorGot = Locked<[BrokerToWorker]>([])
            let ownerRequests = Locked<[(tag: DeliveryTag, request: TaskRequest)]>([])
            let inbound = loop.inbound
            let collector = Task {
                for await batch in inbound {
                    for case .message(let socket, let message) in batch {
                        guard let command = try? BrokerToWorker.decode(message.frames) else { continue }
                        if socket != owner { impostorGot.withLock { $0.append(command) } }
                        if socket == owner, case .request(let tag, let request) = command {
                            ownerRequests.withLock { $0.append((tag, request)) }
                        }
                    }
                }
            }
            defer { collector.cancel() }
            // The owner is served: a task reaches it and its reply comes back.
            let call = Task { try await good.request(service: "sky.echo", body: Array("hello".utf8)) }
            try await eventually("the task reaches the owner") { ownerRequests.withLock { !$0.isEmpty } }
            let (tag, request) = ownerRequests.withLock { $0[0] }
            loop.send(
                WorkerToBroker.reply(
                    tag: tag, TaskReply(requestID: request.requestID, status: .ok, body: request.body)
                )
                .encode(), on: owner)
            #expect(try await call.value == Array("hello".utf8))

            // The owner leaves without a word; a peer with another allowed key takes its id. While
            // the broker's libzmq still holds the owner's connection, it ignores a newcomer with
            // the same id for as long as that connection lasts (no ROUTER_HANDOVER on the workers
            // port), so the impostor, as an attacker would, connects anew until it gets through.
            loop.close(owner)
            for attempt in 1... {
                let impostor = ZMQEventLoop.SocketID(1 + attempt, name: "impostor")
                try await loop.open(
                    .init(
                        id: impostor, type: .dealer,
                        options: [.routingID(routingID)] + keys.credentials(keys.secondWorker).socketOptions,
                        connect: [cluster.workers]))
                loop.send(
                    WorkerToBroker.ready(WorkerAnnouncement(name: "impostor", capacity: 8, services: ["sky.echo"]))
                        .encode(),
                    on: impostor)
                loop.sendPeriodically(WorkerToBroker.heartbeat.encode(), on: impostor, every: .milliseconds(100))
                do {
                    try await eventually("the broker drops the impostor's messages", timeout: .seconds(1)) {
                        try await good.clusterSnapshot().counters.spoofedWorkerMessages >= 1
                    }
                    break
                } catch is NeverTrue where attempt < 20 {
                    loop.close(impostor)
                }
            }
            let snapshot = try await good.clusterSnapshot()
            #expect(!snapshot.workers.contains { $0.name == "owner" }, "the owner's registration ended")
            #expect(!snapshot.workers.contains { $0.name == "impostor" }, "nothing passed to the impostor")
            // Its heartbeats as an unknown peer are answered with DISCONNECT, and with nothing else.
            try await eventually("the impostor is told to register") { impostorGot.withLock { !$0.isEmpty } }
            let got = impostorGot.withLock { $0 }
            #expect(got.allSatisfy { if case .disconnect = $0 { true } else { false } }, "the impostor got \(got)")
            await good.close()
            await cluster.stop()
        }

        /// docs/security.md: skywatch under CURVE needs its key on the watcher list (events)
        /// and the client list (snapshots). Listed, it sees the cluster; a key that is only a
        /// client's is refused on the events endpoint: skywatch says so and exits 1.
        @Test func skywatchOverCurveNeedsAWatcherKey() async throws {
            let keys = try Keys()
            defer { keys.remove() }
            let watchers = keys.directory.appendingPathComponent("watchers")
            try FileManager.default.createDirectory(at: watchers, withIntermediateDirectories: true)
            for (name, lists) in [("watcher", ["watchers", "clients"]), ("peeker", ["clients"])] {
                _ = try CurveKeyFile.write(try CurveKeyPair.generate(), name: name, directory: keys.directory.path)
                for list in lists {
                    try FileManager.default.copyItem(
                        atPath: keys.path("\(name).pub"), toPath: keys.path("\(list)/\(name).pub"))
                }
            }
            let cluster = try await TestCluster.start(
                extraArguments: keys.brokerArguments + ["--watcher-keys", watchers.path])
            defer { cluster.killAll() }
            func watch(_ name: String) throws -> SkyProcess {
                try cluster.track(
                    SkyProcess(
                        "skywatch",
                        ["--broker", cluster.clients, "--events", cluster.events, "--json"]
                            + keys.peerArguments(name), name: "skywatch-\(name)"))
            }
            let watcher = try watch("watcher")
            let peeker = try watch("peeker")
            try await watcher.waitForLine { $0.hasPrefix(#"{"snapshot":"#) }
            #expect(try await peeker.waitForExit() == 1)
            #expect(peeker.errorText.contains("not on the broker's watcher allow-list"), "\(peeker.errorText)")
            _ = try await cluster.startWorker(name: "curve-worker", extraArguments: keys.peerArguments("worker"))
            try await watcher.waitForLine { $0.contains("worker.connected") && $0.contains("curve-worker") }
            let sky = try await Self.client(cluster, keys.credentials(keys.client))
            try await eventually("the peeker's subscription was refused") {
                (try? await sky.clusterSnapshot().counters.handshakesDenied) ?? 0 >= 1
            }
            #expect(!peeker.outputLines.contains { $0.contains("worker.connected") })
            #expect(!peeker.outputLines.contains { $0.hasPrefix(#"{"snapshot":"#) })
            await sky.close()
        }
    }
}
