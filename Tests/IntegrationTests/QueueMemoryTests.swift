import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyZMQ
import Testing

extension IntegrationSuite {
    @Suite("Broker memory per queued request")
    struct QueueMemoryTests {
        /// A REQUEST for a service nobody serves that waits `milliseconds`: with a deadline, as
        /// real clients send, and a no-workers grace as long.
        static func waitingRequest(_ id: RequestID, waits milliseconds: UInt32, body: [UInt8]) -> [[UInt8]] {
            ClientToBroker.request(
                TaskRequest(
                    requestID: id, service: "nobody",
                    header: RequestHeader(
                        attempt: 1, timeoutMilliseconds: milliseconds, noWorkersGraceMilliseconds: milliseconds),
                    body: body)
            ).encode()
        }

        /// Peak resident memory, from /proc (`VmHWM`), in bytes.
        static func peakResident(of pid: Int32) -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
            return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }

        /// One client sends 128 requests of 8 MiB (1 GiB) for a service nobody serves and reads
        /// no reply: the broker queues what its byte bound allows, refuses the rest, and its
        /// resident memory stays far below what was sent: `--queue-bytes` plus 256 MiB, copies
        /// on their way (libzmq's receive pipe, a batch being handled) included. Idle, the
        /// peak is 265–287 MiB (within the 64 MiB over `--queue-bytes` that operations.md
        /// plans for); with the broker's thread starved of CPU, libzmq's pipe (bounded in
        /// messages, not bytes) held more: 423 and 447 MiB were seen. A broker that queued
        /// past its byte bound would hold the whole GiB.
        @Test func aFloodOfLargeRequestsStaysWithinTheQueueBytes() async throws {
            let cluster = try await TestCluster.start()
            defer { cluster.killAll() }
            let raw = ZMQEventLoop.SocketID(0, name: "raw")
            let loop = try await ZMQEventLoop.start(
                name: "large-flood",
                sockets: [.init(id: raw, type: .dealer, options: [.sendHighWaterMark(0)], connect: [cluster.clients])])
            defer { Task { await loop.shutdown() } }
            let before = Self.peakResident(of: cluster.broker.pid)
            let body = [UInt8](repeating: 0x5A, count: 8 << 20)
            let count = 128
            loop.send(
                (0..<count).map { index in
                    .init(
                        socket: raw,
                        frames: Self.waitingRequest(RequestID(high: 2, low: UInt64(index)), waits: 15_000, body: body))
                })
            try await eventually("every request queued or refused", timeout: .seconds(20)) {
                guard let snapshot = try? await cluster.snapshot() else { return false }
                let refused = snapshot.counters.rejectedClientShare + snapshot.counters.rejectedQueueBytes
                return UInt64(snapshot.totalQueued) + refused == UInt64(count)
            }
            let snapshot = try await cluster.snapshot()
            let peak = Self.peakResident(of: cluster.broker.pid)
            print(
                "large flood: \(snapshot.totalQueued) of \(count) requests of 8 MiB queued, broker peak resident \(peak >> 20) MiB (\(before >> 20) MiB before)"
            )
            #expect(peak <= (256 + 256) << 20, "peak resident \(peak >> 20) MiB")
        }

        /// 100,000 requests with 64-byte payloads and deadlines wait for a service nobody serves;
        /// the broker's live heap may grow by at most 300 bytes per request beyond the payload.
        @Test func aHundredThousandQueuedRequestsStaySmall() async throws {
            let cluster = try await TestCluster.start(extraArguments: [
                "--queue-limit", "200000", "--client-queue-share", "1",
            ])
            defer { cluster.killAll() }
            let raw = ZMQEventLoop.SocketID(0, name: "raw")
            let loop = try await ZMQEventLoop.start(
                name: "queue-filler",
                sockets: [.init(id: raw, type: .dealer, options: [.sendHighWaterMark(0)], connect: [cluster.clients])])
            /// Queues `count` requests, then asks for a snapshot on the same connection: its answer
            /// comes after the broker handled every request before it.
            func fill(_ count: Int, from start: Int) async throws -> ClusterSnapshot {
                var batch: [ZMQEventLoop.Outbound] = (start..<start + count).map { index in
                    .init(
                        socket: raw,
                        frames: Self.waitingRequest(
                            RequestID(high: 1, low: UInt64(index)), waits: 600_000,
                            body: [UInt8](repeating: UInt8(index & 0xff), count: 64)))
                }
                let snapshotID = RequestID.random()
                batch.append(
                    .init(
                        socket: raw,
                        frames: ClientToBroker.request(
                            TaskRequest(requestID: snapshotID, service: BrokerService.workers, body: [])
                        ).encode()))
                loop.send(batch)
                for await inbound in loop.inbound {
                    for case .message(_, let message) in inbound {
                        if case .reply(let reply) = try BrokerToClient.decode(message.frames),
                            reply.requestID == snapshotID
                        {
                            return try JSONDecoder().decode(ClusterSnapshot.self, from: Data(reply.body))
                        }
                    }
                }
                throw SkyError.clientClosed
            }
            // Warm the broker's paths (allocator arenas, socket buffers) before the baseline.
            let warm = try await fill(1000, from: 0)
            #expect(warm.totalQueued == 1000)
            let count = 100_000
            let full = try await fill(count, from: 1000)
            #expect(full.totalQueued == 1000 + count)
            let before = try #require(warm.memory)
            let after = try #require(full.memory)
            let heapPerRequest = Double(after.heapInUse - before.heapInUse) / Double(count)
            let residentPerRequest = Double(after.resident - before.resident) / Double(count)
            print("queued request memory (64 B payload): heap \(heapPerRequest) B, resident \(residentPerRequest) B")
            // Resident memory also counts the allocator's free lists and whole pages; measured
            // 395-410 B, so 500 B leaves room for page rounding without hiding a regression.
            // ThreadSanitizer's allocator keeps freed memory and its shadow: 516 B seen there.
            let residentBound = SkyProcess.binaries.path.contains(".build-tsan") ? 700.0 : 500.0
            #expect(residentPerRequest - 64 <= residentBound)
            #expect(heapPerRequest - 64 <= 300)
            await loop.shutdown()
            await cluster.stop()
        }
    }
}
