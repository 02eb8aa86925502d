import Foundation
import Sky
import SkyProtocol
import SkyTestSupport
import SkyWorkloads
import Testing

extension ThirdLineSuite {
    /// Rate limits on a real broker with a real SQLite journal, set with skyctl: 100/s with a
    /// burst of 20 over 10 s, measured from the callers' side; a call that would wait past its
    /// deadline is refused at once with the wait; the limit survives `kill -9`; flags that make
    /// no limit are refused saying why.
    @Suite("Rate limits: 100/s over 10 s, the burst, kill -9")
    struct RateLimitRunTests {
        typealias StateDirectory = IntegrationSuite.JobTests.StateDirectory

        /// Runs `count` echo calls at once; returns when each ended, in order.
        static func echoes(_ count: Int, on sky: SkyClient) async throws -> [ContinuousClock.Instant] {
            try await withThrowingTaskGroup(of: ContinuousClock.Instant.self) { group in
                for index in 0..<count {
                    group.addTask {
                        _ = try await sky.scan(
                            EchoTask(message: "\(index)"),
                            options: ScanOptions(timeout: .seconds(60), deadline: .seconds(60)))
                        return ContinuousClock.now
                    }
                }
                var ends: [ContinuousClock.Instant] = []
                for try await end in group { ends.append(end) }
                return ends.sorted()
            }
        }

        @Test(.timeLimit(.minutes(2)))
        func aLimitHoldsItsRateAndBurstAndSurvivesAKill() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", capacity: 64, extraArguments: ["--workloads", "sky.echo"])
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", ["limits"] + arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            for (rate, words) in [
                ("0", "a rate must be"), ("-1", "a rate must be"), ("1e300/s", "a rate must be"),
                ("100/fortnight", "is not a rate"),
            ] {
                let refused = try await skyctl(["set", EchoTask.service, "--rate", rate])
                #expect(refused.status == 64 && refused.err.contains(words), "\(rate): \(refused)")
            }
            let set = try await skyctl(["set", EchoTask.service, "--rate", "100/s", "--burst", "20"])
            #expect(set.status == 0 && set.out == ["limited sky.echo to 100/s, burst 20"], "\(set)")

            let sky = try await SkyClient(broker: cluster.clients)
            // Meanwhile another caller with 1 s to spare is told at once how long it would wait.
            let other = try await SkyClient(broker: cluster.clients)
            let refusal = Task {
                // Once the backlog is there: 100 started means over 1,000 wait behind the limit.
                try await eventually("the backlog waits for tokens", timeout: .seconds(20)) {
                    try await other.rateLimits().first { $0.service == EchoTask.service }.map { $0.started >= 100 }
                        ?? false
                }
                let asked = ContinuousClock.now
                do {
                    _ = try await other.scan(EchoTask(message: "late"), options: ScanOptions(deadline: .seconds(1)))
                    return (Duration.zero, Duration.zero)
                } catch SkyError.rateLimited(_, let retryAfter) {
                    return (ContinuousClock.now - asked, retryAfter)
                }
            }
            let sent = ContinuousClock.now
            let ends = try await Self.echoes(1200, on: sky)
            let first = try #require(ends.first)
            // The burst: 20 at once (at the rate they would take 190 ms).
            let burst = ends[19] - first
            #expect(burst < .milliseconds(150), "the first 20 ended within \(burst)")
            // Never faster than the rate after it: the bucket held 20 tokens when the calls were
            // sent and gains one each 10 ms from then on, so the i-th (from 0) cannot start
            // sooner than (i - 19) × 10 ms after `sent`. (Measured from the first call's end,
            // the bound depended on that call's own latency, which a loaded machine stretched.)
            for index in [40, 120, 400, 1000] {
                let least = Duration.milliseconds(10 * (index - 20))
                #expect(
                    ends[index] - sent >= least, "call \(index) ended \(ends[index] - sent) after the calls were sent")
            }
            // The rate: 1,000 in 10 s after the first second, within 2 %.
            let window = ends.count { $0 - first >= .seconds(1) && $0 - first < .seconds(11) }
            #expect(window >= 980 && window <= 1020, "\(window) calls ended in 10 s")
            let (took, retryAfter) = try await refusal.value
            #expect(
                took < .milliseconds(500) && retryAfter > .seconds(5), "refused in \(took), would wait \(retryAfter)")

            cluster.broker.killNow()
            try await cluster.restartBroker()
            try await cluster.waitForWorkers(1)
            let listed = try await skyctl(["list"])
            #expect(
                listed.out.contains { $0.hasPrefix("sky.echo") && $0.contains("100/s") && $0.contains("set") },
                "\(listed)")
            let again = try await SkyClient(broker: cluster.clients)
            let after = try await Self.echoes(140, on: again)
            let span = try #require(after.last) - (try #require(after.first))
            #expect(span >= .milliseconds(1000), "140 calls after the restart took \(span): 20 at once, then 100/s")
            await sky.close()
            await other.close()
            await again.close()
            await cluster.stop()
        }

        /// A limit per key taken from the payload's field, set with skyctl: each key runs at its
        /// own rate, a key with a backlog does not hold up another, work without the field is
        /// refused saying why, and the limit survives `kill -9`.
        @Test(.timeLimit(.minutes(2)))
        func aLimitPerKeyHoldsEachKeysRateWithoutHoldingUpAnotherAndSurvivesAKill() async throws {
            let state = StateDirectory()
            let cluster = try await TestCluster.start(extraArguments: state.arguments)
            defer { cluster.killAll() }
            _ = try await cluster.startWorker(name: "w1", capacity: 64, extraArguments: ["--workloads", "sky.echo"])
            func skyctl(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: String) {
                let process = try SkyProcess("skyctl", arguments + ["--broker", cluster.clients])
                let status = try await process.waitForExit()
                return (status, process.outputLines, process.errorText)
            }
            let refused = try await skyctl(["limits", "set", EchoTask.service, "--key-field", "", "--rate", "1/s"])
            #expect(refused.status == 64 && refused.err.contains("a key field must be"), "\(refused)")
            let set = try await skyctl([
                "limits", "set", EchoTask.service, "--key-field", "message", "--rate", "20/s", "--burst", "5",
            ])
            #expect(
                set.status == 0 && set.out == ["limited sky.echo to 20/s per key (field message), burst 5"], "\(set)")
            let listed = try await skyctl(["limits", "list"])
            #expect(listed.out.contains { $0.contains("key (field message)") && $0.contains("20/s") }, "\(listed)")

            let sky = try await SkyClient(broker: cluster.clients)
            func echoes(_ message: String, _ count: Int) async throws -> [ContinuousClock.Instant] {
                try await withThrowingTaskGroup(of: ContinuousClock.Instant.self) { group in
                    for _ in 0..<count {
                        group.addTask {
                            // Equal calls are not sent once: each takes a token.
                            _ = try await sky.scan(
                                EchoTask(message: message),
                                options: ScanOptions(timeout: .seconds(60), deadline: .seconds(60), coalesce: false))
                            return ContinuousClock.now
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }.sorted()
                }
            }
            let start = ContinuousClock.now
            async let backlog = echoes("a", 80)
            // Once a's backlog waits for its tokens, b comes.
            try await eventually("a's backlog waits for tokens", timeout: .seconds(20)) {
                try await sky.rateLimits().first { $0.limit.isPerKey }.map { ($0.keysWaiting ?? 0) > 0 } ?? false
            }
            let bAsked = ContinuousClock.now
            let bEnds = try await echoes("b", 25)
            let aEnds = try await backlog
            // b: its burst of 5, then 20/s: 20 more in about a second, not behind a's 80.
            let bSpan = try #require(bEnds.last) - bAsked
            #expect(bSpan < .milliseconds(2500), "b's 25 took \(bSpan) beside a's backlog")
            #expect(bSpan >= .milliseconds(900), "b's 25 took \(bSpan): faster than its rate")
            // a: 5 at once, then 20/s: 75 more take 3.75 s.
            let aSpan = try #require(aEnds.last) - start
            #expect(aSpan >= .milliseconds(3600), "a's 80 took \(aSpan): faster than its rate")
            #expect(aSpan < .seconds(8), "a's 80 took \(aSpan)")

            // Work whose payload lacks the field is refused, a job as a call.
            do {
                _ = try await sky.scan(BlankTask(), options: ScanOptions(deadline: .seconds(5)))
                Issue.record("a call without the field ran")
            } catch SkyError.invalidTask(let message) {
                #expect(message.contains("which this payload lacks"), "\(message)")
            }
            let job = try await skyctl(["jobs", "submit", EchoTask.service, "--json", #"{"other":1}"#])
            #expect(job.status != 0 && job.err.contains("which this payload lacks"), "\(job)")

            cluster.broker.killNow()
            try await cluster.restartBroker()
            let after = try await skyctl(["limits", "list"])
            #expect(after.out.contains { $0.contains("key (field message)") && $0.contains("set") }, "\(after)")
            await sky.close()
            await cluster.stop()
        }

        /// A task of `sky.echo` whose payload has no `message`.
        struct BlankTask: SkyTask {
            static let service = EchoTask.service
            typealias Result = EchoTask
            var other = 1
        }
    }
}
