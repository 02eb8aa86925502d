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
        let start = ContinuousClock.now
        #expect(machine.ticks(start) == 0)
        #expect(machine.ticks(start + .microseconds(5)) == 5_000)
        #expect(machine.ticks(start + .microseconds(5)) == 5_000)
        #expect(machine.ticks(start + .seconds(2)) == 2_000_000_000)
        #expect(machine.ticks(start) == 0)
    }
}
