import SkyWire
import SkyZMQ
import Testing

@testable import SkyBrokerKit

/// The broker out of file descriptors: libzmq cannot accept peers and tells nobody, so the
/// shell's probe at each tick is the operator's only sign (time moved by hand).
@Suite("Broker state machine: running out of file descriptors")
struct BrokerDescriptorTests {
    /// The probe's answer at `broker.now`, and the log lines it led to.
    static func check(_ broker: inout BrokerHarness, exhausted: Bool) -> [(
        level: BrokerLogLevel, message: String, fields: [String: String]
    )] {
        var actions: [BrokerAction] = []
        broker.machine.descriptorsChecked(exhausted: exhausted, limit: 512, now: broker.now, into: &actions)
        return actions.compactMap { action in
            guard case .log(let level, let message, let fields) = action else { return nil }
            return (level, message, fields)
        }
    }

    @Test func aShortageIsOneWarningThenOneEveryTenSecondsThenOneLineWhenItIsOver() {
        var broker = BrokerHarness()
        #expect(Self.check(&broker, exhausted: false).isEmpty)

        let first = Self.check(&broker, exhausted: true)
        #expect(first.count == 1)
        #expect(first.first?.level == .warning)
        #expect(first.first?.message.hasPrefix("the broker has no file descriptor left") == true)
        #expect(first.first?.message.contains("ulimit -n") == true)
        #expect(first.first?.fields["limit"] == "512")

        // Every tick of 9.9 s more: nothing new.
        for _ in 0..<99 {
            broker.now = broker.now + .milliseconds(100)
            #expect(Self.check(&broker, exhausted: true).isEmpty)
        }
        broker.now = broker.now + .milliseconds(100)
        let again = Self.check(&broker, exhausted: true)
        #expect(
            again.count == 1 && again.first?.message.hasPrefix("the broker still has no file descriptor left") == true)
        #expect(again.first?.fields["seconds"] == "10.0")

        // Free and exhausted alternate while the peers hold on (libzmq takes the next waiting
        // connection at once): the same shortage, not a line each time.
        for index in 0..<40 {
            broker.now = broker.now + .milliseconds(100)
            #expect(Self.check(&broker, exhausted: index % 10 == 9).isEmpty)
        }

        // Free for 10 s: over, with how long it lasted.
        var over: [(level: BrokerLogLevel, message: String, fields: [String: String])] = []
        let freeFrom = broker.now + .milliseconds(100)
        while over.isEmpty {
            broker.now = broker.now + .milliseconds(100)
            over = Self.check(&broker, exhausted: false)
        }
        #expect(broker.now - freeFrom == .seconds(10))
        #expect(over.map(\.level) == [.info])
        #expect(over.first?.message == "file descriptors are free again; new connections are accepted")
        #expect(over.first?.fields["seconds"] == "14.1")
        #expect(Self.check(&broker, exhausted: false).isEmpty)

        // A new shortage warns at once.
        broker.now = broker.now + .seconds(1)
        #expect(Self.check(&broker, exhausted: true).map(\.level) == [.warning])
    }
}
