import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWire
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    @Suite("Size limits: per frame, per message, and in the client")
    struct LimitsTests {
        static let raw = ZMQEventLoop.SocketID(0, name: "raw")

        static func request(body: [UInt8]) -> [[UInt8]] {
            ClientToBroker.request(
                TaskRequest(
                    requestID: .random(), service: "sky.echo", header: RequestHeader(timeoutMilliseconds: 5000),
                    body: body)
            ).encode()
        }

        /// A frame over --max-frame-size disconnects its sender before the broker holds it; a
        /// message over the frame-count or total-size cap is dropped and counted; the broker
        /// serves on.
        @Test func oversizedFramesDisconnectTheirSenderAndOversizedMessagesAreDroppedAndCounted() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--max-frame-size", "65536"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 2)
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.request(service: "sky.echo", body: [1])
            let before = try await sky.clusterSnapshot()

            // One 8 MiB frame: libzmq reads its size from the header and drops the connection.
            let loop = try await ZMQEventLoop.start(
                name: "oversize",
                sockets: [
                    .init(
                        id: Self.raw, type: .dealer, options: [.sendHighWaterMark(0)], connect: [cluster.clients],
                        monitor: [.disconnected, .handshakeSucceeded])
                ])
            loop.send(Self.request(body: [UInt8](repeating: 7, count: 8 << 20)), on: Self.raw)
            var disconnected = false
            watching: for await batch in loop.inbound {
                for case .monitor(_, let event) in batch where event.kind == .disconnected {
                    disconnected = true
                    break watching
                }
            }
            #expect(disconnected)
            await loop.shutdown()
            let afterFrame = try await sky.clusterSnapshot()
            let grown = (afterFrame.memory?.heapInUse ?? 0) - (before.memory?.heapInUse ?? 0)
            print("limits: 8 MiB frame refused; broker heap grew by \(grown) bytes")
            #expect(grown < 1 << 20, "the broker allocated the oversized frame")
            #expect(afterFrame.counters.requestsAccepted == before.counters.requestsAccepted)

            // Under the frame limit but over the message limits: 20 frames; 3 frames of 60 KB.
            let manyFrames = Self.request(body: [1]) + Array(repeating: [UInt8](repeating: 2, count: 10), count: 14)
            let bigMessage =
                Self.request(body: [UInt8](repeating: 3, count: 60_000)) + [
                    [UInt8](repeating: 4, count: 60_000), [UInt8](repeating: 5, count: 60_000),
                ]
            let peer = try await ZMQEventLoop.start(
                name: "overcap", sockets: [.init(id: Self.raw, type: .dealer, connect: [cluster.clients])])
            peer.send([.init(socket: Self.raw, frames: manyFrames), .init(socket: Self.raw, frames: bigMessage)])
            try await eventually("both messages are dropped and counted") {
                try await sky.clusterSnapshot().counters.oversizedMessages
                    >= before.counters.oversizedMessages + 2
            }
            await peer.shutdown()
            let after = try await sky.clusterSnapshot()
            #expect(after.counters.requestsAccepted == before.counters.requestsAccepted)
            #expect(try await sky.request(service: "sky.echo", body: [9]) == [9], "the broker serves on")
            await sky.close()
            await cluster.stop()
        }

        /// A peer that connects and never completes its handshake is disconnected after 5 s.
        @Test func aSilentConnectionIsClosedAfterTheHandshakeTimeout() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let port = try #require(cluster.clients.split(separator: ":").last.flatMap { UInt16($0) })
            let started = ContinuousClock.now
            // A plain TCP connection that says nothing; its blocking read waits on a thread of its own.
            let closed: Bool = await withCheckedContinuation { done in
                Thread {
                    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                    var address = sockaddr_in()
                    address.sin_family = sa_family_t(AF_INET)
                    address.sin_port = port.bigEndian
                    address.sin_addr.s_addr = inet_addr("127.0.0.1")
                    var timeout = timeval(tv_sec: 15, tv_usec: 0)
                    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    let connected = withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                    var buffer = [UInt8](repeating: 0, count: 256)
                    // The broker sends its greeting; then, without ours, it must close.
                    var result = connected == 0 ? 1 : -1
                    while result > 0 { result = recv(fd, &buffer, buffer.count, 0) }
                    close(fd)
                    done.resume(returning: result == 0)
                }.start()
            }
            let elapsed = ContinuousClock.now - started
            print("limits: a silent connection was closed after \(elapsed)")
            #expect(closed, "the connection was not closed by the broker")
            #expect(elapsed >= .seconds(4) && elapsed < .seconds(8), "closed after \(elapsed)")
            await cluster.stop()
        }

        /// The client refuses a task larger than the broker accepts, at once and without sending it.
        @Test func theClientRefusesAnOversizedTaskLocallyInUnder10ms() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            var configuration = SkyClient.Configuration()
            configuration.maxRequestBytes = 64 << 10
            let sky = try await SkyClient(broker: cluster.clients, configuration: configuration)
            let before = try await sky.clusterSnapshot().counters.requestsAccepted
            // The median of 21 refusals: one call on a loaded 2-core machine can wait for the
            // scheduler longer than the refusal itself takes.
            var durations: [Duration] = []
            for _ in 0..<21 {
                let started = ContinuousClock.now
                do {
                    _ = try await sky.request(service: "sky.echo", body: [UInt8](repeating: 1, count: 1 << 20))
                    Issue.record("an oversized task was accepted")
                } catch let error as SkyError {
                    durations.append(ContinuousClock.now - started)
                    #expect(error == .requestTooLarge(bytes: 1 << 20, limit: 64 << 10))
                }
            }
            let median = durations.sorted()[durations.count / 2]
            print("limits: client refused a 1 MiB task in \(median) (median of 21)")
            #expect(median < .milliseconds(10))
            #expect(try await sky.clusterSnapshot().counters.requestsAccepted == before)
            await sky.close()
            await cluster.stop()
        }

        /// A client configured for larger tasks than the broker takes (its default 16 MiB against
        /// `--max-frame-size 65536`) learns the broker's limit from `mmi.features` and refuses a
        /// larger task, naming that limit, instead of sending it: libzmq would close the
        /// connection, the client would send it again on each reconnect, and every call on that
        /// connection would stall until its deadline (measured before: 30 s of reconnects, then
        /// "the broker is unreachable"). Calls beside it, and tasks within the limit, go through.
        @Test func aTaskOverTheBrokersFrameLimitFailsAtOnceAndCallsBesideItGoOn() async throws {
            let cluster = try await TestCluster.start(extraArguments: ["--max-frame-size", "65536"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "echo", capacity: 2)
            let sky = try await SkyClient(broker: cluster.clients)
            _ = try await sky.request(service: "sky.echo", body: [1])
            let before = try await sky.clusterSnapshot().counters

            let started = ContinuousClock.now
            async let small = sky.request(
                service: "sky.echo", body: [UInt8](repeating: 2, count: 60_000),
                options: ScanOptions(timeout: .seconds(5)))
            do {
                _ = try await sky.request(
                    service: "sky.echo", body: [UInt8](repeating: 1, count: 100_000),
                    options: ScanOptions(timeout: .seconds(5)))
                Issue.record("a task over the broker's frame limit was accepted")
            } catch let error as SkyError {
                #expect(error == .requestTooLarge(bytes: 100_000, limit: 65536))
            }
            let refusedAfter = ContinuousClock.now - started
            #expect(try await small == [UInt8](repeating: 2, count: 60_000))
            print("limits: a 100 KB task against a 64 KiB broker refused in \(refusedAfter)")
            #expect(refusedAfter < .seconds(1))

            // The same for a durable job: its submission is refused before the broker sees it.
            do {
                _ = try await sky.submit(EchoTask(message: String(repeating: "x", count: 100_000)))
                Issue.record("a job over the broker's frame limit was sent")
            } catch let error as SkyError {
                guard case .requestTooLarge(let bytes, let limit) = error else {
                    Issue.record("expected requestTooLarge, got \(error)")
                    return
                }
                #expect(bytes > 100_000)
                #expect(limit == 65536)
            }
            let after = try await sky.clusterSnapshot().counters
            // Only the 60 KB call reached the broker (and the snapshot requests); no connection broke.
            #expect(after.requestsAccepted == before.requestsAccepted + 1)
            #expect(after.oversizedMessages == before.oversizedMessages)
            await sky.close()
            await cluster.stop()
        }
    }
}
