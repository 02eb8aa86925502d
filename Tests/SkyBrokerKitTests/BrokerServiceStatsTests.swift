import Foundation
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

@Suite("Broker state machine: per-service stats")
struct BrokerServiceStatsTests {
    let client = PeerID([0, 0, 0, 0, 1])
    let worker = PeerID([0, 0, 0, 1, 1])

    @Test func aWindowsQuantilesFallInTheRightBuckets() throws {
        var window = ServiceWindow()
        for _ in 0..<98 { window.record(nanoseconds: 2_000_000, status: .ok) }
        window.record(nanoseconds: 300_000_000, status: .handlerError)
        window.record(nanoseconds: 300_000_000, status: .ok)
        let p50 = try #require(window.quantileMilliseconds(0.5))
        let p99 = try #require(window.quantileMilliseconds(0.99))
        #expect((2.0...2.0 * 1.19).contains(p50), "\(p50)")
        #expect((300.0...300.0 * 1.19).contains(p99), "\(p99)")
        #expect(window.completed == 100 && window.failed == 1)
        #expect(window.statuses[Int(ReplyStatus.ok.rawValue)] == 99)
        #expect(window.statuses[Int(ReplyStatus.handlerError.rawValue)] == 1)
        #expect(ServiceWindow().quantileMilliseconds(0.5) == nil)
    }

    /// The bucket is `⌈4 log₂ µs⌉`, found without `log2`: the same for every microsecond count
    /// up to a million and for large ones, powers of two (exact) included.
    @Test func aLatencysBucketIsTheCeilingOfFourTimesItsLogarithm() {
        func expected(_ nanoseconds: Int64) -> Int {
            let microseconds = Double(max(1, nanoseconds / 1000))
            return min(ServiceWindow.bucketCount - 1, Int((4 * log2(microseconds)).rounded(.up)))
        }
        var values: [Int64] = [0, 1, 999, 1000, 1999, .max]
        values += (1...1_000_000).map { Int64($0) * 1000 }
        values += (0..<40).flatMap { shift in [-1, 0, 1].map { (Int64(1000) << shift) + $0 * 1000 } }
        let wrong = values.filter { ServiceWindow.bucket($0) != expected($0) }
        // The count, not the list: a wrong bound puts hundreds of thousands of values in it.
        let wrongCount = wrong.count
        #expect(wrongCount == 0, "\(wrong.prefix(5).map { ($0, ServiceWindow.bucket($0), expected($0)) })")
    }

    /// A window of failures the broker answered itself holds its status counts only: a flood
    /// of requests for unknown services costs 128 bytes a service per period, not 1.1 KB.
    @Test func aWindowOfFailuresOnlyHasNoHistograms() throws {
        var window = ServiceWindow()
        for _ in 0..<5 { window.recordFailure(.noWorkers) }
        #expect(window.buckets.isEmpty && window.waitBuckets.isEmpty)
        #expect(window.failed == 5 && window.statuses[Int(ReplyStatus.noWorkers.rawValue)] == 5)
        #expect(window.quantileMilliseconds(0.5) == nil)
        window.record(nanoseconds: 2_000_000, status: .ok)
        #expect(window.buckets.count == ServiceWindow.bucketCount && window.waitBuckets.isEmpty)
        window.record(nanoseconds: 2_000_000, status: .ok, waited: 1_000)
        #expect(window.waitBuckets.reduce(0, +) == 1)
        #expect(try #require(window.quantileMilliseconds(0.5)) >= 2.0)
    }

    /// Each stats period reports per service its queue, rate, failures (the workers' and the
    /// broker's own) and latency from arrival to reply, then starts afresh.
    @Test func statsReportEachServicesQueueRateFailuresAndLatency() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        let first = RequestID(high: 0, low: 1)
        _ = broker.request(client, first)
        _ = broker.request(client, RequestID(high: 0, low: 2))
        _ = broker.request(
            client, RequestID(high: 0, low: 3), service: "nobody.serves", noWorkersGrace: .milliseconds(100))
        _ = broker.advance(.milliseconds(40))
        _ = broker.reply(worker, client: client, first)
        _ = broker.worker(worker, .heartbeat)
        let stats = try #require(events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats)
        let scan = try #require(stats.services?["sky.scan"])
        #expect(scan.completed == 1 && scan.failed == 0 && scan.queued == 0, "the second runs, the first answered")
        #expect((40.0...40.0 * 1.19).contains(scan.p50Milliseconds ?? 0), "\(String(describing: scan.p50Milliseconds))")
        let unserved = try #require(stats.services?["nobody.serves"])
        #expect(unserved.failed == 1 && unserved.p50Milliseconds == nil, "answered noWorkers by the broker")
        _ = broker.worker(worker, .heartbeat)
        let next = try #require(events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats)
        #expect(next.services?["sky.scan"]?.completed == 0, "a new period")
        #expect(next.services?["nobody.serves"] == nil, "nothing of it left")
    }

    /// Dashboards show recent failures with their error: each stats period carries its first
    /// few, the workers' (type and message from the reply) and the broker's own, and no more.
    @Test func statsCarryThePeriodsFirstFailuresWithTheirErrors() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        let first = RequestID(high: 0, low: 1)
        _ = broker.request(client, first)
        let error = RemoteErrorBody(type: "ScanError", message: String(repeating: "disk on fire ", count: 40))
        _ = broker.reply(worker, client: client, first, status: .handlerError, body: error.encoded())
        _ = broker.request(
            client, RequestID(high: 0, low: 2), service: "nobody.serves", noWorkersGrace: .milliseconds(100))
        _ = broker.advance(.milliseconds(200))
        _ = broker.worker(worker, .heartbeat)
        let stats = try #require(events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats)
        let failures = try #require(stats.failures)
        #expect(failures.count == 2)
        #expect(failures.first?.requestID == first.description && failures.first?.service == "sky.scan")
        #expect(failures.first?.status == "handlerError" && failures.first?.type == "ScanError")
        #expect(failures.first?.worker == "w-\(worker)")
        #expect(failures.first?.message.count == TaskFailure.maxMessageCharacters, "cut to the limit")
        #expect(failures.last?.service == "nobody.serves" && failures.last?.type == "noWorkers")
        #expect(failures.last?.worker == nil)

        for low in UInt64(10)..<30 {
            _ = broker.request(client, RequestID(high: 0, low: low))
            _ = broker.reply(worker, client: client, RequestID(high: 0, low: low), status: .handlerError, body: [7])
        }
        _ = broker.worker(worker, .heartbeat)
        let storm = try #require(events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats)
        #expect(storm.failures?.count == TaskFailure.maxPerPeriod, "at most a few samples a period")
        #expect(storm.failures?.first?.type == "unknown", "a body that is not the error JSON still shows")
        #expect(storm.services?["sky.scan"]?.failed == 20, "counted in full")
        _ = broker.worker(worker, .heartbeat)
        let quiet = try #require(events(broker.advance(.seconds(1))).first { $0.event == .brokerStats }?.stats)
        #expect(quiet.failures == nil, "none left over for the next period")
    }

    /// The metrics' per-service queue bytes and dispatch waits: kept as requests come and go,
    /// never by a pass over the queue.
    /// Each request is counted once in its service's statuses (`sky_broker_tasks_total`): one
    /// cancelled while it waits as `cancelled` when the broker answers the CANCEL; one cancelled
    /// while it runs by its worker's reply, whatever it says.
    @Test func aCancelledRequestIsCountedOnceWhereverItWas() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        for low in 1...3 as ClosedRange<UInt64> { _ = broker.request(client, RequestID(high: 0, low: low)) }
        _ = broker.advance(.milliseconds(10))  // the stats period starts at the first tick
        _ = broker.cancel(client, RequestID(high: 0, low: 1))
        _ = broker.cancel(client, RequestID(high: 0, low: 3))
        _ = broker.cancel(client, RequestID(high: 0, low: 3))
        // The running one's handler finished anyway: its late reply only returns the credit.
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 1))
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 2))
        _ = broker.worker(worker, .heartbeat)
        let actions = broker.advance(.seconds(1))
        let windows = try #require(
            actions.compactMap { if case .serviceWindows(let windows) = $0 { windows } else { nil } }.first)
        let statuses = try #require(windows["sky.scan"]?.statuses)
        #expect(statuses[Int(ReplyStatus.cancelled.rawValue)] == 2, "the waiting one and the running one, as answered")
        #expect(statuses[Int(ReplyStatus.ok.rawValue)] == 1)
        #expect(statuses.reduce(0, +) == 3)
    }

    /// A request its lease took (its deadline and the grace passed while it ran) is counted
    /// once, as `deadlineExceeded`: its worker's late reply only returns the credit.
    @Test func aRequestItsLeaseTookIsCountedOnce() throws {
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        _ = broker.request(client, RequestID(high: 0, low: 1), timeout: .milliseconds(100))
        var taken: [BrokerAction] = []
        for _ in 0..<7 {
            taken += broker.worker(worker, .heartbeat)
            taken += broker.advance(.seconds(1))
        }
        #expect(replies(taken, to: RequestID(high: 0, low: 1)).map(\.status) == [.deadlineExceeded])
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 1))
        _ = broker.worker(worker, .heartbeat)
        let actions = taken + broker.advance(.seconds(1))
        let statuses = actions.compactMap { action -> [UInt64]? in
            guard case .serviceWindows(let windows) = action else { return nil }
            return windows["sky.scan"]?.statuses.map { UInt64($0) }
        }
        let total = statuses.reduce(into: [UInt64](repeating: 0, count: 32)) { sum, window in
            for (index, count) in window.enumerated() where index < sum.count { sum[index] += count }
        }
        #expect(total[Int(ReplyStatus.deadlineExceeded.rawValue)] == 1)
        #expect(total.reduce(0, +) == 1, "\(statuses)")
    }

    @Test func aServiceReportsItsQueuedBytesAndItsRequestsWaits() throws {
        func queuedBytes(_ machine: BrokerStateMachine, _ service: String) -> Int? {
            machine.services.number(of: service).map { machine.queue.bytes(of: $0) }
        }
        var broker = BrokerHarness()
        _ = broker.ready(worker, capacity: 1, services: ["sky.scan"])
        _ = broker.request(client, RequestID(high: 0, low: 1))
        _ = broker.request(client, RequestID(high: 0, low: 2), body: [1, 2, 3, 4, 5])
        _ = broker.request(client, RequestID(high: 0, low: 3), body: [1, 2], trace: [7, 7, 7])
        _ = broker.advance(.milliseconds(30))
        #expect(queuedBytes(broker.machine, "sky.scan") == 10, "bodies and the trace frame")
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 1))
        #expect(queuedBytes(broker.machine, "sky.scan") == 5, "the second left the queue")
        _ = broker.reply(worker, client: client, RequestID(high: 0, low: 2))
        _ = broker.worker(worker, .heartbeat)
        let actions = broker.advance(.seconds(1))
        let stats = try #require(events(actions).first { $0.event == .brokerStats }?.stats)
        #expect(stats.services?["sky.scan"]?.queuedBytes == 0, "the third runs now")
        let windows = try #require(
            actions.compactMap { if case .serviceWindows(let windows) = $0 { windows } else { nil } }.first)
        let waits = try #require(windows["sky.scan"]?.waitBuckets)
        #expect(waits.reduce(0, +) == 2, "two replies, each with its wait")
        let waited = try #require(waits.lastIndex { $0 > 0 })
        #expect((30_000_000.0...30_000_000 * 1.19).contains(ServiceWindow.upperBoundNanoseconds(waited)))
        #expect(windows["sky.scan"]?.statuses[Int(ReplyStatus.ok.rawValue)] == 2)
    }
}
