import SkyZMQ
import Testing

@testable import SkyBrokerKit

/// The broker's guard against serving on after a pause, time moved by hand.
@Suite("Stall guard: a broker that wakes after a long pause says nothing more")
struct StallGuardTests {
    @Test func aGapTheJournalCountsAsTooLongStopsServingForGood() {
        let asked = Locked<[Duration]>([])
        let guardian = StallGuard { gap in
            asked.withLock { $0.append(gap) }
            return gap > .seconds(2)
        }
        let start = ContinuousClock.now
        #expect(guardian.mayServe(now: start), "the first wake-up has nothing to compare")
        #expect(guardian.mayServe(now: start + .milliseconds(100)))
        #expect(guardian.mayServe(now: start + .seconds(2)), "1.9 s apart: not too long")
        #expect(!guardian.mayServe(now: start + .seconds(12)), "10 s apart: it steps down")
        #expect(!guardian.mayServe(now: start + .seconds(12) + .milliseconds(100)), "and stays down")
        #expect(asked.withLock { $0 } == [.milliseconds(100), .milliseconds(1900), .seconds(10)])
    }
}
