import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit

/// The machine's compact time: durations and instants as nanoseconds, total for every value.
@Suite("Broker time: nanoseconds")
struct BrokerTimeTests {
    @Test func durationsAreWholeNanosecondsTruncatedTowardZero() {
        #expect(BrokerStateMachine.nanoseconds(.zero) == 0)
        #expect(BrokerStateMachine.nanoseconds(.seconds(3) + .nanoseconds(7)) == 3_000_000_007)
        #expect(BrokerStateMachine.nanoseconds(.milliseconds(-1500)) == -1_500_000_000)
        #expect(BrokerStateMachine.nanoseconds(Duration(secondsComponent: 0, attosecondsComponent: 999_999_999)) == 0)
        #expect(BrokerStateMachine.nanoseconds(.seconds(9_223_372_036)) == 9_223_372_036_000_000_000)
    }

    @Test func durationsBeyondInt64NanosecondsSaturate() {
        #expect(BrokerStateMachine.nanoseconds(.seconds(9_223_372_037)) == Int64.max / 2)
        #expect(BrokerStateMachine.nanoseconds(.seconds(Int64.max)) == Int64.max / 2)
        #expect(BrokerStateMachine.nanoseconds(.seconds(Int64.min)) == Int64.max / 2)
    }

    /// An instant converts against the first one the machine saw, also when asked again.
    @Test func instantsCountFromTheFirstAndRepeatTheSameValue() {
        var machine = BrokerStateMachine()
        let start = MonotonicInstant.now
        #expect(machine.ticks(start) == 0)
        #expect(machine.ticks(start + .microseconds(5)) == 5_000)
        #expect(machine.ticks(start + .microseconds(5)) == 5_000)
        #expect(machine.ticks(start + .seconds(2)) == 2_000_000_000)
        #expect(machine.ticks(start) == 0)
    }

    /// The machine's instants are plain nanoseconds: sums and differences exact in range, held
    /// at the ends beyond it (an absurd interval is a time that never comes, not a trap).
    @Test func instantsAddSubtractAndSaturate() {
        let start = MonotonicInstant(nanoseconds: 1_000)
        #expect((start + .microseconds(2)).nanoseconds == 3_000)
        #expect((start - .microseconds(2)).nanoseconds == -1_000)
        #expect((start + .microseconds(2)) - start == .microseconds(2))
        #expect(start - (start + .seconds(1)) == .seconds(-1))
        #expect(start < start + .nanoseconds(1))
        #expect((start + .seconds(1)).nanoseconds(since: start) == 1_000_000_000)
        let late = MonotonicInstant(nanoseconds: .max - 10)
        #expect((late + .seconds(1)).nanoseconds == .max)
        #expect((late + .seconds(Int64.max)).nanoseconds == .max)
        let early = MonotonicInstant(nanoseconds: .min + 10)
        #expect((early - .seconds(1)).nanoseconds == .min)
        #expect(late.nanoseconds(since: early) == .max)
        #expect(early.nanoseconds(since: late) == .min)
    }

    /// `now` reads the clock the loops read, and never goes back.
    @Test func nowReadsTheLoopsClock() {
        let first = MonotonicInstant.now
        let clock = LoopTime.clockNanoseconds()
        let second = MonotonicInstant.now
        #expect(first.nanoseconds <= clock && clock <= second.nanoseconds)
    }
}
