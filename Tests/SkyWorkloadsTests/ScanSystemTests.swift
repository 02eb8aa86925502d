import Foundation
import SkyProtocol
import SkyTestSupport
import SkyWorkerKit
import SkyWorkloads
import SkyZMQ
import Testing

@testable import SkyTasks

/// Counts handlers running at once and records the order in which they started.
actor ConcurrencyProbe {
    private(set) var running = 0
    private(set) var peak = 0
    private(set) var started: [Int] = []

    func enter(_ number: Int) {
        running += 1
        peak = max(peak, running)
        started.append(number)
    }

    func leave() { running -= 1 }
}

/// Holds handlers until the test opens it.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}

struct Boom: Error, CustomStringConvertible {
    var description: String { "boom: the handler failed on purpose" }
}

struct SleepTask: SkyTask {
    static let service = "test.sleep"
    typealias Result = Int
    var number: Int
}

@Suite("ScanSystem: capacity, dispatch and errors")
struct ScanSystemTests {
    static func request(_ service: String, _ body: [UInt8]) -> TaskRequest {
        TaskRequest(requestID: .random(), service: service, body: body)
    }

    @Test func typedHandlersDecodeRunAndEncode() async throws {
        let system = ScanSystem(name: "t", capacity: 2)
        try await BuiltInWorkloads.register(BuiltInWorkloads.all, on: system)
        let task = ScanTask(sector: 5, size: 64)
        let reply = await system.execute(Self.request(ScanTask.service, Array(try JSONEncoder().encode(task))))
        #expect(reply.status == .ok)
        let report = try JSONDecoder().decode(SectorReport.self, from: Data(reply.body))
        #expect(report == (try SectorScanner.scan(task)))
        #expect(await system.services == ["sky.echo", "sky.flaky", "sky.gather", "sky.scan", "sky.sleep"])
    }

    /// A flow's callback travels as the JSON array of the group's results (what the broker
    /// passes on), not as an object: the protocol's default coding, not a synthesized one.
    @Test func aGroupsCallbackTaskIsTheArrayOfItsResults() async throws {
        let sleeps = [SkyWorkloads.SleepTask(milliseconds: 1, tag: 4), SkyWorkloads.SleepTask(milliseconds: 2, tag: 5)]
        let encoded = try JSONTaskCoder().encode(GatherTask(results: sleeps))
        #expect(encoded == (try JSONTaskCoder().encode(sleeps)))
        let system = ScanSystem(name: "t", capacity: 1)
        try await BuiltInWorkloads.register([GatherTask.service], on: system)
        let reply = await system.execute(Self.request(GatherTask.service, encoded))
        #expect(try JSONDecoder().decode(GatherTask.Result.self, from: Data(reply.body)).tags == [4, 5])
    }

    @Test func jsonEncodingIsCanonicalSoEqualTasksGiveEqualBytes() throws {
        // Equal bytes for equal tasks is what lets the client coalesce concurrent equal scans.
        let bytes = try JSONTaskCoder().encode(SkyWorkloads.SleepTask(milliseconds: 2000, tag: 7))
        #expect(bytes == Array(#"{"milliseconds":2000,"tag":7}"#.utf8))
    }

    @Test func theCoderIsPluggable() async throws {
        let system = ScanSystem(name: "t", capacity: 1)
        await system.register(EchoTask.self, coder: .propertyList) { EchoTask(message: $0.message.uppercased()) }
        let coder = PropertyListTaskCoder()
        let reply = await system.execute(Self.request(EchoTask.service, try coder.encode(EchoTask(message: "plist"))))
        #expect(reply.status == .ok)
        #expect(try coder.decode(EchoTask.self, from: reply.body) == EchoTask(message: "PLIST"))
        // A client speaking JSON to a property-list service gets a typed error.
        let mismatched = await system.execute(
            Self.request(EchoTask.service, try JSONTaskCoder().encode(EchoTask(message: "json"))))
        #expect(mismatched.status == .invalidPayload)
    }

    @Test func echoReturnsItsInputBytes() async throws {
        let system = ScanSystem(name: "t", capacity: 1)
        try await BuiltInWorkloads.register([EchoTask.service], on: system)
        let body: [UInt8] = [0, 1, 2, 0xff]
        let reply = await system.execute(Self.request(EchoTask.service, body))
        #expect(reply.status == .ok)
        #expect(reply.body == body)
    }

    @Test func aThrowingHandlerBecomesATypedRemoteError() async {
        let system = ScanSystem(name: "t", capacity: 1)
        await system.register(SleepTask.self) { _ in throw Boom() }
        let reply = await system.execute(Self.request(SleepTask.service, Array(#"{"number":1}"#.utf8)))
        #expect(reply.status == .handlerError)
        let error = RemoteErrorBody(decoding: reply.body)
        #expect(error.type.hasSuffix("Boom"))
        #expect(error.message == "boom: the handler failed on purpose")
    }

    @Test func anUnknownServiceAndABadPayloadAreTypedErrors() async {
        let system = ScanSystem(name: "t", capacity: 1)
        await system.register(SleepTask.self) { $0.number }
        let unknown = await system.execute(Self.request("nope", []))
        #expect(unknown.status == .unknownService)
        #expect(RemoteErrorBody(decoding: unknown.body).message.contains("does not serve nope"))
        let bad = await system.execute(Self.request(SleepTask.service, Array("not json".utf8)))
        #expect(bad.status == .invalidPayload)
    }

    /// A few services are looked through in order, more in the table: each finds its own
    /// handler, and a service that is not there is unknown either way.
    @Test(arguments: [1, ScanSystem.Handlers.Lookup.fewLimit, ScanSystem.Handlers.Lookup.fewLimit + 1, 40])
    func eachServiceFindsItsOwnHandlerHoweverManyThereAre(services: Int) async {
        let system = ScanSystem(name: "t", capacity: 1)
        for number in 0..<services {
            await system.registerRaw(service: "service-\(number)") { _ in Array("\(number)".utf8) }
        }
        let table = await system.handlerTable
        for number in 0..<services {
            let reply = await table.execute(Self.request("service-\(number)", []))
            #expect(reply.status == .ok && reply.body == Array("\(number)".utf8), "service-\(number)")
            #expect(table.serves("service-\(number)"))
        }
        #expect(await table.execute(Self.request("service-\(services)", [])).status == .unknownService)
        #expect(!table.serves("service-\(services)"))
    }

    /// The handler sees its cancellation within 50 ms: the median of five trials (other suites
    /// share the two cores and can delay any single one); the worst within 5 s, where a
    /// cancellation that never arrived would take the handler's 30 s.
    @Test func aCancelledTaskSHandlerObservesCancellationWithin50Milliseconds() async throws {
        let system = ScanSystem(name: "t", capacity: 1)
        let observed = Locked<ContinuousClock.Instant?>(nil)
        await system.register(SleepTask.self) { task in
            do {
                try await untilCancelled()
            } catch {
                observed.withLock { $0 = .now }
                throw error
            }
        }
        // Five trials, measured again (three times at most) while their median misses: at the
        // start of the run, beside both integration lines and the documentation's build, one
        // median was 87 ms. A handler that is not told misses every time.
        var delays: [Duration] = []
        var medians: [Duration] = []
        for set in 0..<3 {
            delays = []
            for trial in 0..<5 {
                observed.withLock { $0 = nil }
                let request = Self.request(
                    SleepTask.service, Array(try JSONEncoder().encode(SleepTask(number: set * 5 + trial))))
                let running = Task { await system.execute(request) }
                try await eventually("the handler runs") { await system.runningCount > 0 }
                let cancelledAt = ContinuousClock.now
                running.cancel()
                let reply = await running.value
                #expect(reply.status == .cancelled)
                let seen = try #require(observed.withLock { $0 })
                delays.append(seen - cancelledAt)
            }
            delays.sort()
            medians.append(delays[2])
            if delays[2] < Duration.milliseconds(50).scaled { break }
        }
        #expect(medians.min()! < Duration.milliseconds(50).scaled, "medians: \(medians), last delays: \(delays)")
        // The worst of five only bounds a cancellation that never arrives (the handler sleeps
        // 30 s): with the whole suite and the documentation's build on two cores one trial was
        // seen to take 1.05 s.
        #expect(delays[4] < Duration.seconds(5).scaled, "delays: \(delays)")
        #expect(await system.runningCount == 0)
    }

    @Test func flakyFailsEveryNthCallWithATypedError() async throws {
        let system = ScanSystem(name: "t", capacity: 1)
        try await BuiltInWorkloads.register([FlakyTask.service], on: system, flakyEvery: 3)
        var statuses: [ReplyStatus] = []
        for value in 1...6 {
            let body = Array(try JSONEncoder().encode(FlakyTask(value: value)))
            let reply = await system.execute(Self.request(FlakyTask.service, body))
            statuses.append(reply.status)
            if reply.status == .handlerError {
                #expect(RemoteErrorBody(decoding: reply.body).message.hasPrefix("simulated failure on call \(value)"))
            }
        }
        #expect(statuses == [.ok, .ok, .handlerError, .ok, .ok, .handlerError])
    }

    @Test func unknownBuiltInWorkloadsAreRejected() async {
        let system = ScanSystem(name: "t", capacity: 1)
        await #expect(throws: BuiltInWorkloads.UnknownWorkload.self) {
            try await BuiltInWorkloads.register(["sky.nope"], on: system)
        }
    }

    /// 10× overload: never more than `capacity` handlers at once, and waiting work starts in
    /// arrival order (checked exactly with capacity 1, where one start follows one finish).
    @Test(arguments: [1, 3])
    func underOverloadCapacityHoldsAndWaitersAreServedInOrder(capacity: Int) async throws {
        let system = ScanSystem(name: "t", capacity: capacity)
        let probe = ConcurrencyProbe()
        let gate = Gate()
        await system.register(SleepTask.self) { task in
            await probe.enter(task.number)
            await gate.wait()
            await probe.leave()
            return task.number
        }
        let total = capacity * 10
        // Submit one by one so arrival order is known. Nothing finishes before the gate opens,
        // so running + waiting grows by exactly one per submission.
        var tasks: [Task<TaskReply, Never>] = []
        for number in 0..<total {
            let request = Self.request(SleepTask.service, Array(try JSONEncoder().encode(SleepTask(number: number))))
            tasks.append(Task { await system.execute(request) })
            try await eventually("task \(number) admitted or waiting") {
                await system.runningCount + system.waitingCount >= number + 1
            }
        }
        #expect(await system.runningCount == capacity)
        #expect(await system.waitingCount == total - capacity)
        await gate.open()
        for task in tasks { #expect(await task.value.status == .ok) }
        #expect(await probe.peak == capacity)
        let started = await probe.started
        #expect(started.count == total)
        if capacity == 1 { #expect(started == Array(0..<total)) }
        #expect(await system.runningCount == 0)
        #expect(await system.waitingCount == 0)
    }

    /// `ScanSystem(capacity: 0)` ended the calling process (a precondition), and a capacity
    /// above `UInt32.max` trapped when the worker announced it: clamped to 1...65,536 instead.
    @Test(arguments: [(0, 1), (-7, 1), (Int.max, 65_536), (8, 8)])
    func capacityIsClampedNotTrappedOn(_ given: Int, _ kept: Int) {
        #expect(ScanSystem(name: "w", capacity: given).capacity == kept)
    }
}
