import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit

@Suite("RateBudget: so many a second for each key, and a count of the rest")
struct RateBudgetTests {
    let start = MonotonicInstant.now

    @Test func theFirstUsesOfASecondGoAndTheRestAreCountedOnceItIsOver() {
        var budget = RateBudget<String>(perSecond: 3)
        let firstSecond = (0..<10).map { budget.admit("a", now: start + .milliseconds($0 * 10)).allowed }
        #expect(firstSecond == [true, true, true] + Array(repeating: false, count: 7))
        // Nothing is over yet: no summary.
        #expect(budget.endedSeconds(now: start + .milliseconds(999)).isEmpty)
        // The next use after the second reports what it held back, once.
        let next = budget.admit("a", now: start + .seconds(1))
        #expect(next == .init(allowed: true, heldBackBefore: 7))
        #expect(budget.admit("a", now: start + .seconds(1)) == .init(allowed: true, heldBackBefore: 0))
    }

    @Test func eachKeyHasItsOwnSecond() {
        var budget = RateBudget<String>(perSecond: 1)
        #expect(budget.admit("a", now: start).allowed)
        #expect(!budget.admit("a", now: start).allowed)
        // A flood of one key does not silence another.
        #expect(budget.admit("b", now: start + .milliseconds(500)).allowed)
        #expect(!budget.admit("b", now: start + .milliseconds(600)).allowed)
        #expect(!budget.admit("b", now: start + .milliseconds(700)).allowed)
        // At 1.2 s, a's second is over (2 uses, 1 held back), b's is not.
        let ended = budget.endedSeconds(now: start + .milliseconds(1200))
        #expect(ended.map(\.key) == ["a"])
        #expect(ended.map(\.heldBack) == [1])
        // Reported once: a's second is forgotten, its next use starts a fresh one.
        #expect(budget.endedSeconds(now: start + .milliseconds(1300)).isEmpty)
        #expect(budget.admit("a", now: start + .milliseconds(1300)) == .init(allowed: true, heldBackBefore: 0))
        let later = budget.endedSeconds(now: start + .seconds(3))
        #expect(later.map(\.key) == ["b"])
        #expect(later.map(\.heldBack) == [2])
    }

    @Test func aSecondThatHeldNothingBackEndsWithoutASummary() {
        var budget = RateBudget<Int>(perSecond: 5)
        for key in 0..<100 { _ = budget.admit(key, now: start) }
        #expect(budget.endedSeconds(now: start + .seconds(1)).isEmpty)
        // And the keys are forgotten: each starts a fresh second.
        #expect(budget.admit(7, now: start + .seconds(1)) == .init(allowed: true, heldBackBefore: 0))
    }

    @Test func aBudgetOfNoneHoldsEverythingBack() {
        var budget = RateBudget<String>(perSecond: 0)
        #expect(!budget.admit("a", now: start).allowed)
        #expect(!budget.admit("a", now: start + .milliseconds(1)).allowed)
        #expect(budget.endedSeconds(now: start + .seconds(2)).map(\.heldBack) == [2])
    }
}
