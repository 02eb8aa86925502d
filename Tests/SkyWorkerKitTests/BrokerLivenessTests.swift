import SkyWire
import SkyZMQ
import Testing

@testable import SkyWorkerKit

@Suite("Worker: broker liveness and reconnect backoff (time moved by hand)")
struct WorkerBrokerLivenessTests {
    let start = MonotonicInstant.now

    func liveness(jitter: Double = 0) -> BrokerLiveness {
        var configuration = BrokerLiveness.Configuration()
        configuration.jitter = jitter
        return BrokerLiveness(configuration: configuration, now: start, seed: 42)
    }

    @Test func theBrokerIsLostAfterExactlyLivenessTimesIntervalOfSilence() {
        var state = liveness()
        #expect(state.tick(now: start + .seconds(3) - .nanoseconds(1)) == nil)
        #expect(state.tick(now: start + .seconds(3)) == .lost(reconnectAt: start + .seconds(4)))
    }

    @Test func anyMessageKeepsItAlive() {
        var state = liveness()
        state.heard(now: start + .seconds(2))
        #expect(state.tick(now: start + .seconds(4)) == nil)
        #expect(state.tick(now: start + .seconds(5)) != nil)
    }

    @Test func backoffDoublesUpToItsCapAndResetsWhenTheBrokerSpeaks() {
        var state = liveness()
        var now = start
        var waits: [Duration] = []
        for _ in 0..<8 {
            now = now + .seconds(3)
            guard case .lost(let reconnectAt) = state.tick(now: now) else {
                Issue.record("expected the broker lost")
                return
            }
            waits.append(now.duration(to: reconnectAt))
            now = reconnectAt
            #expect(state.tick(now: now) == .connect)
        }
        #expect(waits == [1, 2, 4, 8, 16, 32, 32, 32].map { Duration.seconds($0) })
        state.heard(now: now)
        now = now + .seconds(3)
        #expect(state.tick(now: now) == .lost(reconnectAt: now + .seconds(1)))
    }

    @Test func nothingHappensWhileWaitingToReconnect() {
        var state = liveness()
        _ = state.tick(now: start + .seconds(3))
        #expect(state.tick(now: start + .milliseconds(3999)) == nil)
        #expect(state.tick(now: start + .seconds(4)) == .connect)
    }

    @Test func jitterSpreadsReconnectsWithinItsBounds() {
        var waits: Set<Duration> = []
        for seed in 1...50 {
            var configuration = BrokerLiveness.Configuration()
            configuration.jitter = 0.2
            var state = BrokerLiveness(configuration: configuration, now: start, seed: UInt64(seed) * 7919)
            guard case .lost(let at) = state.tick(now: start + .seconds(3)) else { continue }
            let wait = (start + .seconds(3)).duration(to: at)
            #expect(wait >= .milliseconds(800) && wait <= .milliseconds(1200))
            waits.insert(wait)
        }
        #expect(waits.count > 10)
    }

    @Test func aDisconnectFromTheBrokerMeansRegisterNow() {
        var state = liveness()
        #expect(state.brokerDisconnected(now: start + .seconds(1)) == .connect)
        #expect(state.tick(now: start + .seconds(3)) == nil)
    }

    /// Any configuration a caller sets runs without trapping: a heartbeat of `Int64.max` seconds
    /// times a liveness of `Int.max` overflowed `Duration`, a NaN jitter trapped converting the
    /// backoff, a zero heartbeat would spin. They are clamped (``BrokerLiveness/Configuration/clamped``).
    @Test func extremeConfigurationsAreClampedNotTrappedOn() {
        var extreme = BrokerLiveness.Configuration()
        extreme.heartbeatInterval = .seconds(Int64.max)
        extreme.liveness = .max
        extreme.initialBackoff = .seconds(Int64.max)
        extreme.maxBackoff = .seconds(-1)
        extreme.jitter = .nan
        var liveness = BrokerLiveness(configuration: extreme, now: start, seed: 42)
        #expect(liveness.configuration.heartbeatInterval == .seconds(3600) && liveness.configuration.liveness == 1000)
        #expect(liveness.configuration.jitter == 0 && liveness.configuration.maxBackoff == .zero)
        #expect(liveness.tick(now: start + .seconds(1)) == nil)
        liveness.lostNow(now: start)
        var small = BrokerLiveness.Configuration()
        small.heartbeatInterval = .zero
        small.liveness = -3
        #expect(small.clamped.heartbeatInterval == .milliseconds(10) && small.clamped.expiry == .milliseconds(10))
    }
}
