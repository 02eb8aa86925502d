import Foundation
import Testing

@testable import SkyBrokerKit

/// A broker's name in the store carries its host and clients endpoint, which the active broker
/// asks when it is cut off from the store: the two come back out of the name as they went in.
@Suite("A standby's name: its host and clients endpoint")
struct StandbyNameTests {
    @Test(arguments: ["tcp://*:5555", "tcp://[::1]:5555", "ipc:///run/sky/clients", "tcp://10.0.0.2:5555"])
    func theEndpointComesBackOutOfTheName(endpoint: String) throws {
        let found = try #require(PostgresJournal.endpoint(in: PostgresJournal.name(clients: endpoint)))
        #expect(found.endpoint == endpoint)
        #expect(found.host == ProcessInfo.processInfo.hostName)
    }

    @Test func aNameWithoutAnEndpointHasNone() {
        #expect(PostgresJournal.endpoint(in: "(unnamed)") == nil)
        #expect(PostgresJournal.WaitingStandby(name: "garbage", own: "").probe == nil)
    }

    /// On this host, a standby given a wildcard address is asked at its host's name; one named
    /// with this broker's own host and endpoint is another host of the same name, not asked.
    @Test func aStandbyOnThisHostWithAWildcardAddressCanBeAsked() {
        let own = PostgresJournal.name(clients: "tcp://*:5555")
        let other = PostgresJournal.name(clients: "tcp://*:5556")
        #expect(PostgresJournal.WaitingStandby(name: other, own: own).probe != nil)
        #expect(PostgresJournal.WaitingStandby(name: own, own: own).probe == nil)
    }
}
