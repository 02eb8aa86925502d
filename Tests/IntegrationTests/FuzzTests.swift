import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import SkyZMQ
import Testing

extension IntegrationSuite {
    @Suite("Fuzzing both broker ports while real scans run")
    struct FuzzTests {
        static let clientsPeer = ZMQEventLoop.SocketID(0, name: "fuzz-clients")
        static let workersPeer = ZMQEventLoop.SocketID(1, name: "fuzz-workers")

        /// Random and mutated messages: half pure noise, half a valid command (framed or packed)
        /// with bytes flipped, frames cut, dropped, duplicated or shuffled. Valid bases use their own service name
        /// and short deadlines, so what parses as a real command cannot crowd out real work.
        struct Fuzzer {
            var random: SplitMix64
            var sent = 0

            mutating func noise() -> [[UInt8]] {
                (0..<(1 + random.next(below: 8))).map { _ in
                    (0..<random.next(below: 200)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                }
            }

            mutating func mutate(_ frames: [[UInt8]]) -> [[UInt8]] {
                var frames = frames
                for _ in 0..<(1 + random.next(below: 3)) {
                    switch random.next(below: 6) {
                    case 0, 1:
                        let index = random.next(below: frames.count)
                        if !frames[index].isEmpty {
                            frames[index][random.next(below: frames[index].count)] ^= UInt8(1 + random.next(below: 255))
                        }
                    case 2:
                        let index = random.next(below: frames.count)
                        frames[index] = Array(frames[index].prefix(random.next(below: frames[index].count + 1)))
                    case 3 where frames.count > 1: frames.remove(at: random.next(below: frames.count))
                    case 4:
                        frames.insert(frames[random.next(below: frames.count)], at: random.next(below: frames.count))
                    default: frames.shuffle(using: &random)
                    }
                }
                return frames
            }

            mutating func clientMessage() -> [[UInt8]] {
                sent += 1
                guard random.next(below: 2) == 0 else { return noise() }
                let id = RequestID(high: random.next(), low: random.next())
                let request = TaskRequest(
                    requestID: id, service: "fuzz.none", header: RequestHeader(timeoutMilliseconds: 50),
                    body: noise().first ?? [])
                let base: ClientToBroker
                switch random.next(below: 4) {
                case 0: base = .cancel(id)
                case 1: base = .packedRequest(request)
                default: base = .request(request)
                }
                let mutated = mutate(base.encode())
                // A mutation that still parses as a request without a short deadline would wait
                // legitimately (until its deadline, within the queue limit): real load, not
                // malformed input, and it would read as growth here. Send noise instead.
                switch try? ClientToBroker.decode(mutated) {
                case .request(let request)?, .packedRequest(let request)?:
                    let timeout = request.header.timeoutMilliseconds
                    return timeout == 0 || timeout > 1000 ? noise() : mutated
                case .cancel?, nil:
                    return mutated
                }
            }

            mutating func workerMessage() -> [[UInt8]] {
                sent += 1
                guard random.next(below: 2) == 0 else { return noise() }
                let base: WorkerToBroker
                let reply = TaskReply(
                    requestID: RequestID(high: random.next(), low: random.next()), status: .ok, body: [1])
                switch random.next(below: 6) {
                case 0: base = .ready(WorkerAnnouncement(name: "fuzz", capacity: 1, services: ["fuzz.none"]))
                case 1: base = .heartbeat
                case 2: base = .disconnect
                case 3: base = .features([WireFormat.packedFeature])
                case 4: base = .packedReply(tag: DeliveryTag((noise().first ?? [1]).prefix(255)), reply)
                default: base = .reply(tag: DeliveryTag(noise().first ?? [1]), reply)
                }
                return mutate(base.encode())
            }
        }

        /// For 60 s (SKY_FUZZ_SECONDS overrides), seeded noise and mutations hit both ROUTER ports
        /// while a client keeps real scans going. The broker must not crash, its heap (the median
        /// of samples every 5 s) must stay within 10 % of its size after a 20 s warm-up, every
        /// real scan must complete correctly, and the protocol-error counters must rise.
        @Test(.timeLimit(.minutes(2)))
        func seededNoiseOnBothPortsForAMinuteCrashesNothingLeaksNothingAndLosesNoScan() async throws {
            let seconds = Double(ProcessInfo.processInfo.environment["SKY_FUZZ_SECONDS"] ?? "") ?? 60
            let seed = UInt64(ProcessInfo.processInfo.environment["SKY_FUZZ_SEED"] ?? "") ?? 20_261_122
            let cluster = try await TestCluster.start(
                extraArguments: TestCluster.fastHeartbeats + ["--log-level", "error"])
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "real", capacity: 4, extraArguments: ["--workloads", "sky.scan"])
            let sky = try await SkyClient(broker: cluster.clients)
            let started = ContinuousClock.now
            let end = started + .seconds(seconds)

            let fuzz = try await ZMQEventLoop.start(
                name: "fuzzer",
                sockets: [
                    .init(
                        id: Self.clientsPeer, type: .dealer, options: [.sendHighWaterMark(0)],
                        connect: [cluster.clients]),
                    .init(
                        id: Self.workersPeer, type: .dealer, options: [.sendHighWaterMark(0)],
                        connect: [cluster.workers]),
                ])
            // Read what the broker answers, as a real peer would: unread replies would pile up in
            // the broker's send queue and look like a leak.
            let answers = fuzz.inbound
            let draining = Task { for await _ in answers {} }
            defer { draining.cancel() }
            let fuzzing = Task {
                var fuzzer = Fuzzer(random: SplitMix64(seed: seed))
                while ContinuousClock.now < end {
                    var batch: [ZMQEventLoop.Outbound] = []
                    for _ in 0..<50 {
                        batch.append(.init(socket: Self.clientsPeer, frames: fuzzer.clientMessage()))
                        batch.append(.init(socket: Self.workersPeer, frames: fuzzer.workerMessage()))
                    }
                    fuzz.send(batch)
                    try? await Task.sleep(for: .milliseconds(50))  // the fuzz's pace: 2,000 messages a second
                }
                return fuzzer.sent
            }
            let scanning = Task {
                var done = 0
                var sector = 0
                while ContinuousClock.now < end {
                    let tasks = (sector..<sector + 32).map { ScanTask(sector: $0, size: 64) }
                    sector += 32
                    let reports = try await sky.scanConcurrently(tasks)
                    for (task, report) in zip(tasks, reports.sorted { $0.sector < $1.sector }) {
                        #expect(report == (try SectorScanner.scan(task)))
                    }
                    done += reports.count
                }
                return done
            }
            // The baseline after a warm-up: until then the broker's tables grow to their working size.
            try await Task.sleep(until: started + .seconds(min(20, seconds / 3)), clock: .continuous)  // a time
            let early = try await sky.clusterSnapshot()
            // The heap every 5 s after the baseline: transient peaks (tasks held by fuzz workers
            // for their lease, a burst of real scans) are not growth; the typical value is.
            var heaps: [Int] = []
            var next = started + .seconds(min(20, seconds / 3)) + .seconds(5)
            while next < end {
                try await Task.sleep(until: next, clock: .continuous)  // the samples' times
                heaps.append(try await sky.clusterSnapshot().memory?.heapInUse ?? 0)
                next = next + .seconds(5)
            }
            let sent = await fuzzing.value
            let scanned = try await scanning.value
            let late = try await sky.clusterSnapshot()
            await fuzz.shutdown()

            let malformed = late.counters.malformedClientMessages + late.counters.malformedWorkerMessages
            heaps.append(try #require(late.memory?.heapInUse))
            // A leak makes the later samples larger than the earlier ones; the typical value of
            // each half is its median (a single warm-up sample could catch a transient peak or
            // trough: -13 % and +10 % were seen without any trend).
            func median(_ values: ArraySlice<Int>) -> Int { values.sorted()[values.count / 2] }
            let heapBefore = median(heaps.prefix(heaps.count / 2))
            let heapAfter = median(heaps.suffix(heaps.count - heaps.count / 2))
            let growth = Double(heapAfter - heapBefore) / Double(heapBefore)
            let peak = Double((heaps.max() ?? 0) - heapBefore) / Double(max(1, heapBefore))
            print(
                "fuzz (seed \(seed), \(seconds) s): \(sent) hostile messages, \(malformed) counted malformed, \(late.counters.unknownWorkerMessages) unknown-worker; \(scanned) real scans all correct; broker heap after warm-up: median \(heapBefore) bytes in the first half, \(heapAfter) (\(String(format: "%+.1f", growth * 100)) %), peak \(String(format: "%+.1f", peak * 100)) % (every 5 s: \(heaps.map(String.init).joined(separator: ", ")))"
            )
            #expect(cluster.broker.isRunning, "the broker died: \(cluster.diagnostics)")
            #expect(malformed > early.counters.malformedClientMessages + early.counters.malformedWorkerMessages)
            if heapBefore > 0 {
                #expect(growth <= 0.10, "the broker's typical heap grew by \(growth * 100) %")
                #expect(peak <= 0.30, "the broker's heap peaked \(peak * 100) % above its warm-up size")
            } else {
                print("fuzz: this allocator does not report its heap (a sanitizer's); memory not checked")
            }
            #expect(scanned > 0)
            await sky.close()
            await cluster.stop()
        }
    }
}
