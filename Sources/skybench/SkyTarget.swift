import Foundation
import Histogram
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWire
import SkyWorkloads
import Synchronization

/// A Sky cluster under test: a `skybroker`, `workers` × `skyworker` serving one built-in
/// service, and a `SkyClient` in this process (whose CPU counts as the client's).
final class SkyTarget: BenchTarget {
    let system = BenchSystem.sky
    let client: SkyClient
    /// Where clients reach the broker (for a load from another process).
    let clientsEndpoint: String
    private let broker: SkyProcess
    private let workers: [SkyProcess]
    private let cpu: ProcessCPU
    private let service: String
    /// Where the measuring calls run.
    private let callers: CallerPlacement
    private let clock = ContinuousClock()

    /// Every call of a measurement: no sharing of equal payloads, no retry (a failure fails the
    /// run instead of hiding in the figures).
    static let options = ScanOptions(timeout: .seconds(30), retry: RetryPolicy(maxAttempts: 1), coalesce: false)

    private init(
        broker: SkyProcess, workers: [SkyProcess], client: SkyClient, clientsEndpoint: String, service: String,
        callers: CallerPlacement
    ) {
        self.callers = callers
        self.broker = broker
        self.clientsEndpoint = clientsEndpoint
        self.workers = workers
        self.client = client
        self.service = service
        cpu = ProcessCPU(
            roles: [("client", getpid()), ("broker", broker.pid)]
                + workers.enumerated().map { ("worker-\($0.offset + 1)", $0.element.pid) })
    }

    /// Starts a broker and `workers` workers of `capacity` each, and waits until all registered.
    static func start(
        workers count: Int, capacity: Int, handlers: WorkerPlacement = .pool, callers: CallerPlacement = .pool,
        service: String = EchoTask.service, transport: Transport, brokerArguments: [String] = []
    ) async throws -> SkyTarget {
        let endpoints = transport.endpoints(for: "sky")
        let started = try await StartedBroker.start(
            clients: endpoints[0], workers: endpoints[1], events: endpoints[2],
            arguments: ["--log-level", "warning"] + brokerArguments)
        let broker = started.process
        var workers: [SkyProcess] = []
        do {
            for index in stride(from: 1, through: count, by: 1) {
                workers.append(
                    try SkyProcess(
                        "skyworker",
                        [
                            "--broker", started.workers, "--capacity", "\(capacity)", "--workloads", service,
                            "--name", "bench-\(index)", "--log-level", "warning",
                        ] + handlers.arguments, name: "skyworker-\(index)"))
            }
            let client = try await SkyClient(broker: started.clients)
            let target = SkyTarget(
                broker: broker, workers: workers, client: client, clientsEndpoint: started.clients, service: service,
                callers: callers)
            try await target.waitForWorkers(count)
            return target
        } catch {
            for process in [broker] + workers { process.killNow() }
            throw error
        }
    }

    /// Waits until the broker knows `count` workers (there is no event to await from here
    /// without a subscriber, and this runs once per cluster, outside any measurement).
    private func waitForWorkers(_ count: Int) async throws {
        let deadline = clock.now + .seconds(30)
        while try await client.clusterSnapshot().workers.count < count {
            guard clock.now < deadline else {
                throw BenchError("only some of \(count) skyworkers registered within 30 s")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func latency(payload: Int, requests: Int, warmup: Int) async throws -> Figures {
        let body = [UInt8](repeating: 0x61, count: payload)
        for _ in 0..<warmup { try await call(body) }
        // Microseconds with three significant digits, up to a minute.
        var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
        let cpuBefore = cpu.read()
        let switchesBefore = cpu.readSwitches()
        let started = clock.now
        if callers == .completion {
            let timed = Mutex((histogram: histogram, left: requests - 1, sent: clock.now))
            try await CallbackChains.run(
                lanes: 1,
                more: {
                    timed.withLock { timed in
                        timed.histogram.record(UInt64(max(1, (ContinuousClock.now - timed.sent).inSeconds * 1e6)))
                        timed.left -= 1
                        timed.sent = ContinuousClock.now
                        return timed.left >= 0
                    }
                }, check: check(body)
            ) { done in self.call(body, completion: done) }
            histogram = timed.withLock { $0.histogram }
        } else {
            try await withTaskExecutorPreference(callers.executor(of: client)) {
                for _ in 0..<requests {
                    let sent = clock.now
                    try await call(body)
                    histogram.record(UInt64(max(1, (clock.now - sent).inSeconds * 1e6)))
                }
            }
        }
        let elapsed = (clock.now - started).inSeconds
        return Figures(
            tasks: requests, seconds: elapsed, p50: Double(histogram.valueAtPercentile(50)),
            p99: Double(histogram.valueAtPercentile(99)), cpuSeconds: cpu.since(cpuBefore),
            switches: cpu.switchesSince(switchesBefore))
    }

    func throughput(payload: Int, inFlight: Int, warmup: Duration, measure: Duration) async throws -> Figures {
        let body = [UInt8](repeating: 0x61, count: payload)
        return try await throughput(
            inFlight: inFlight, warmup: warmup, measure: measure, call: { try await self.call(body) },
            check: check(body), callback: { self.call(body, completion: $0) })
    }

    /// Throughput of the typed path: `scan(EchoTask)`, whose message is `payload` bytes of text,
    /// encoded and decoded with the default JSON coder (the worker's echo returns it as it came).
    func typedThroughput(payload: Int, inFlight: Int, warmup: Duration, measure: Duration) async throws -> Figures {
        let task = EchoTask(message: String(repeating: "a", count: payload))
        let client = self.client
        return try await throughput(
            inFlight: inFlight, warmup: warmup, measure: measure,
            call: {
                let echoed = try await client.scan(task, options: Self.options)
                guard echoed == task else { throw BenchError("sky.echo answered \(echoed) for \(task)") }
            },
            check: { _ in nil },
            callback: { done in
                client.scan(task, options: Self.options) { result in
                    done(
                        result.flatMap { echoed in
                            echoed == task
                                ? .success([]) : .failure(.invalidResult("sky.echo answered \(echoed) for \(task)"))
                        })
                }
            })
    }

    /// Keeps `inFlight` calls of `call` going (of `callback` in the completion placement, each
    /// success checked by `check`); counts those that complete in the measured phase.
    func throughput(
        inFlight: Int, warmup: Duration, measure: Duration, call: @escaping @Sendable () async throws -> Void,
        check: @escaping CallbackChains.Check, callback: @escaping CallbackChains.Call
    ) async throws -> Figures {
        let from = clock.now + warmup
        let until = from + measure
        let cpu = self.cpu
        let cpuUsed = Task {
            try await Task.sleep(until: from, clock: .continuous)
            let before = cpu.read()
            let switchesBefore = cpu.readSwitches()
            try await Task.sleep(until: until, clock: .continuous)
            return (cpu.since(before), cpu.switchesSince(switchesBefore))
        }
        if callers == .completion {
            let counted = Atomic(0)
            try await CallbackChains.run(
                lanes: inFlight,
                more: {
                    let now = ContinuousClock.now
                    if now >= from, now < until { counted.add(1, ordering: .relaxed) }
                    return now < until
                }, check: check, call: callback)
            let (cpuSeconds, switches) = try await cpuUsed.value
            return Figures(
                tasks: counted.load(ordering: .relaxed), seconds: measure.inSeconds, cpuSeconds: cpuSeconds,
                switches: switches)
        }
        let completed = try await withTaskExecutorPreference(callers.executor(of: client)) {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<inFlight {
                    group.addTask {
                        var counted = 0
                        while true {
                            try await call()
                            let now = ContinuousClock.now
                            if now >= until { return counted }
                            if now >= from { counted += 1 }
                        }
                    }
                }
                return try await group.reduce(0, +)
            }
        }
        let (cpuSeconds, switches) = try await cpuUsed.value
        return Figures(tasks: completed, seconds: measure.inSeconds, cpuSeconds: cpuSeconds, switches: switches)
    }

    /// Runs `tasks` sky.scan tasks, `concurrency` at a time, and returns the tasks per second.
    func scanRate(tasks: Int, concurrency: Int) async throws -> Double {
        let started = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            func add() {
                let sector = next
                next += 1
                group.addTask { _ = try await self.client.scan(ScanTask(sector: sector), options: Self.options) }
            }
            for _ in 0..<min(concurrency, tasks) { add() }
            while try await group.next() != nil {
                if next < tasks { add() }
            }
        }
        return Double(tasks) / (clock.now - started).inSeconds
    }

    /// The broker's memory and queue, as its snapshot reports them.
    /// CPU seconds the broker used so far.
    func brokerCPUSeconds() -> Double {
        cpu.read()["broker"] ?? 0
    }

    func snapshot() async throws -> ClusterSnapshot {
        try await client.clusterSnapshot()
    }

    /// ``call(_:)`` by the callback API; its reply is checked by the chain (``check(_:)``).
    private func call(_ body: [UInt8], completion: @escaping CallbackChains.Done) {
        client.request(service: service, body: body, options: Self.options, completion: completion)
    }

    /// What ``call(_:)`` checks of a reply to `body`.
    private func check(_ body: [UInt8]) -> CallbackChains.Check {
        let (service, count) = (service, body.count)
        return { reply in
            reply.count == count ? nil : BenchError("\(service) answered \(reply.count) bytes for \(count)")
        }
    }

    private func call(_ body: [UInt8]) async throws {
        let reply = try await client.request(service: service, body: body, options: Self.options)
        guard reply.count == body.count else {
            throw BenchError("\(service) answered \(reply.count) bytes for \(body.count)")
        }
    }

    func stop() async {
        await client.close()
        await SkyProcess.killAll(workers + [broker])
    }
}
