import SkyTestSupport
import SkyWire
import Testing

@testable import Sky

@Suite("TimeoutTask on a manual clock")
struct TimeoutTaskTests {
    /// An operation that never finishes by itself (until cancelled).
    static func forever() async throws -> Int {
        try await untilCancelled()
    }

    @Test func itThrowsAtItsDeadlineAndNotBefore() async throws {
        let clock = ManualClock()
        let task = TimeoutTask(timeout: .seconds(10), clock: clock) { try await Self.forever() }
        let outcome = Task { () -> Result<Int, any Error> in
            do { return .success(try await task.value) } catch { return .failure(error) }
        }
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(9_999))
        // Give a wrongly early timeout every chance to show itself.
        for _ in 0..<100 { await Task.yield() }
        #expect(clock.sleeperCount == 1, "still waiting at 9.999 s")
        clock.advance(by: .milliseconds(1))
        let result = await outcome.value
        #expect(throws: TimeoutError(timeout: .seconds(10))) { try result.get() }
    }

    @Test func aFasterOperationWinsAndStopsTheTimer() async throws {
        let clock = ManualClock()
        let value = try await TimeoutTask(timeout: .seconds(10), clock: clock) { 42 }.value
        #expect(value == 42)
        try await eventually("the timer is cancelled") { clock.sleeperCount == 0 }
    }

    /// A timeout of `Int64.max` seconds (a caller's "never") trapped in `ContinuousClock.sleep`;
    /// it is a century now.
    @Test func aTimeoutOfIntMaxSecondsIsACenturyNotATrap() async throws {
        let value = try await TimeoutTask(timeout: .seconds(Int64.max)) { 42 }.value
        #expect(value == 42)
        #expect(Duration.seconds(Int64.max).asSleep == .longestSleep)
        #expect(Duration.seconds(-3).asSleep == .zero)
        #expect(Duration.seconds(Int64.max).wholeNanoseconds == .max)
        #expect(Duration.seconds(Int64.min).wholeNanoseconds == .min)
        #expect(Duration.milliseconds(1500).wholeNanoseconds == 1_500_000_000)
    }

    @Test func theOperationsErrorIsThrown() async {
        struct Boom: Error, Equatable {}
        let clock = ManualClock()
        await #expect(throws: Boom()) {
            try await TimeoutTask(timeout: .seconds(10), clock: clock) { () async throws -> Int in throw Boom() }.value
        }
    }

    @Test func anOperationThatIgnoresCancellationStillTimesOutOnTime() async throws {
        let clock = ManualClock()
        let (gate, open) = AsyncStream.makeStream(of: Void.self)
        let task = TimeoutTask(timeout: .seconds(1), clock: clock) { () async -> Int in
            for await _ in gate {}  // ignores cancellation until the test opens the gate
            return 1
        }
        let outcome = Task { try await task.value }
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        await #expect(throws: TimeoutError.self) { try await outcome.value }
        open.finish()
    }

    @Test func cancellingTheCallerThrowsCancellationErrorAndCancelsTheOperation() async throws {
        let clock = ManualClock()
        let (started, didStart) = AsyncStream.makeStream(of: Void.self)
        let (ended, didEnd) = AsyncStream.makeStream(of: Bool.self)
        let task = TimeoutTask(timeout: .seconds(10), clock: clock) { () async throws -> Int in
            didStart.yield()
            do {
                return try await Self.forever()
            } catch {
                didEnd.yield(error is CancellationError)
                throw error
            }
        }
        let caller = Task { try await task.value }
        for await _ in started { break }
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        var iterator = ended.makeAsyncIterator()
        #expect(await iterator.next() == true, "the operation saw the cancellation")
    }
}
