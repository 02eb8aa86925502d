import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit
@testable import SkyProtocol

/// The broker's small parts on their own: each is a value with a few inputs; the machine's
/// tests (`BrokerReliabilityTests`, `BrokerServiceStatsTests`, …) run them in place.
@Suite("Broker parts: periodic work, tally, event publishing, memory return")
struct BrokerPartsTests {
    static func at(_ seconds: Double) -> MonotonicInstant { MonotonicInstant(nanoseconds: Int64(seconds * 1e9)) }

    @Test func heartbeatsGoAtTheFirstTickAndStatsAfterAWholePeriod() {
        var periodic = PeriodicWork()
        let heartbeats = [0, 0.9, 1].map { periodic.heartbeatsDue(now: Self.at($0), interval: .seconds(1)) }
        #expect(heartbeats == [true, false, true])
        let stats = [0, 0.5, 1, 1.5].map { periodic.statsDue(now: Self.at($0), interval: .seconds(1)) }
        #expect(stats == [false, false, true, false], "the first tick starts the first period")
    }

    @Test func aPeriodCountsItsOwnRepliesAndKeepsTheFirstFailures() {
        var tally = WorkTally()
        tally.replied(failed: false)
        tally.replied(failed: true)
        tally.loopIteration(took: .milliseconds(3))
        tally.loopIteration(took: .milliseconds(1))
        let failure = TaskFailure(
            requestID: "r", service: "s", status: "handlerError", type: "E", message: "m", worker: nil)
        for _ in 0..<(TaskFailure.maxPerPeriod + 5) { tally.sample(failure) }
        let first = tally.closePeriod()
        #expect(first.completed == 2 && first.longestIteration == .milliseconds(3))
        #expect(first.failures.count == TaskFailure.maxPerPeriod)
        tally.replied(failed: false)
        let second = tally.closePeriod()
        #expect(second.completed == 1 && second.longestIteration == .zero && second.failures.isEmpty)
        #expect(tally.completed == 3 && tally.failed == 1, "the totals run on")
    }

    @Test func eventsAreNumberedWhoeverWatchesAndGreetingsArePaced() {
        var events = EventPublishing()
        #expect(!events.isWatched(.taskFailed), "nobody subscribed")
        let numbers = [events.number(), events.number()]
        #expect(numbers == [1, 2])
        events.subscription(Array("task.".utf8), subscribed: true)
        #expect(events.isWatched(.taskFailed) && !events.isWatched(.jobFailed))
        events.subscription([], subscribed: true)
        #expect(events.isWatched(.jobFailed), "the empty topic takes all")

        let first = events.subscriberJoined(now: Self.at(0))
        #expect(first)
        events.greeted(now: Self.at(0), interval: .milliseconds(200))
        let second = events.subscriberJoined(now: Self.at(0.1))
        #expect(!second, "within the interval: one greeting later")
        #expect(!events.isHelloDue(now: Self.at(0.15)))
        #expect(events.isHelloDue(now: Self.at(0.2)))
    }

    /// After a large drain the storage is made anew and memory goes back at the next tick, and
    /// again 1, 2, 4 and 8 s apart; a small queue never asks for it.
    @Test func memoryGoesBackAfterALargeDrainAndFourTimesMore() {
        var memory = MemoryReturn()
        memory.queueHolds(bytes: 100, count: 2)
        #expect(!memory.held(bytes: 1000, orCount: 10))
        memory.queueHolds(bytes: 5000, count: 1)
        #expect(memory.held(bytes: 1000, orCount: 10))
        let early = memory.isDue(now: Self.at(0))
        #expect(!early, "not before the storage is made anew")
        memory.storageReleased()
        #expect(!memory.held(bytes: 1000, orCount: 10), "the peaks start again")
        var returned: [Double] = []
        for tenth in 0...200 {
            let second = Double(tenth) / 10
            if memory.isDue(now: Self.at(second)) { returned.append(second) }
        }
        #expect(returned == [0, 1, 3, 7, 15])
    }

    /// Registrations naming many bytes in all return memory as a drain does (a peer that
    /// registered over and over left the broker at 1.2 GB).
    @Test func memoryGoesBackAfterManyBytesOfRegistrations() {
        var memory = MemoryReturn()
        memory.registered(bytes: MemoryReturn.registeredBytesToReturn - 1)
        var returned: [Double] = []
        if memory.isDue(now: Self.at(0)) { returned.append(0) }
        memory.registered(bytes: 1)
        for tenth in 1...20 {
            let second = Double(tenth) / 10
            if memory.isDue(now: Self.at(second)) { returned.append(second) }
        }
        #expect(returned == [0.1, 1.1], "at the next tick, and again later as after a drain")
    }
}
