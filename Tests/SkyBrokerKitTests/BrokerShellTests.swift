import Foundation
import Logging
import SkyProtocol
import SkyZMQ
import Testing

@testable import SkyBrokerKit

/// The broker's shell between its sockets and its state machine: with CURVE on it fails
/// closed, whatever libzmq lets through.
@Suite("Broker shell: admission of messages")
struct BrokerShellTests {
    static func shell(curve: Bool) throws -> Broker.Shell {
        let security = try BrokerSecurity(keys: CurveKeyPair.generate(), allowLists: [:])
        return Broker.Shell(
            state: Locked(BrokerStateMachine(configuration: .init())),
            authenticator: curve
                ? ThreadConfined(ZAPAuthenticator(security: security), name: "the ZAP authenticator") : nil,
            journal: nil,
            limits: .init(frames: 16, bytes: 1 << 20), logger: Logger(label: "test"))
    }

    static let ready = WorkerToBroker.ready(WorkerAnnouncement(name: "w", capacity: 1, services: ["svc"])).encode()
    static let request = ClientToBroker.request(
        TaskRequest(requestID: RequestID(high: 1, low: 1), service: "svc", body: [1])
    ).encode()

    /// docs/security.md: on a CURVE broker a message without the User-Id of the socket's role
    /// (none at all, or another role's) is dropped and counted, on every port.
    @Test func withCurveAMessageWithoutTheRolesUserIDIsDroppedAndCounted() throws {
        let shell = try Self.shell(curve: true)
        var outbound: [ZMQEventLoop.Outbound] = []
        let inputs: [ZMQEventLoop.Inbound] = [
            .message(Broker.clientsSocket, ZMQMessage(frames: [[1]] + Self.request)),
            .message(Broker.clientsSocket, ZMQMessage(frames: [[2]] + Self.request, userID: "worker:abc")),
            .message(Broker.workersSocket, ZMQMessage(frames: [[3]] + Self.ready)),
            .message(Broker.workersSocket, ZMQMessage(frames: [[4]] + Self.ready, userID: "client:abc")),
            .message(Broker.eventsSocket, ZMQMessage(frames: [[1]])),
        ]
        shell.handle(inputs, into: &outbound)
        let snapshot = shell.snapshot()
        #expect(snapshot.counters.unauthenticatedMessages == 5)
        #expect(snapshot.counters.requestsAccepted == 0)
        #expect(snapshot.workers.isEmpty)
        #expect(outbound.isEmpty, "nothing is answered to an unauthenticated peer")

        // The same messages with their role's User-Id get through.
        shell.handle(
            [
                .message(Broker.workersSocket, ZMQMessage(frames: [[3]] + Self.ready, userID: "worker:abc")),
                .message(Broker.clientsSocket, ZMQMessage(frames: [[1]] + Self.request, userID: "client:abc")),
            ], into: &outbound)
        #expect(shell.snapshot().workers.count == 1)
        #expect(shell.snapshot().counters.requestsAccepted == 1)
        #expect(shell.snapshot().counters.unauthenticatedMessages == 5)
    }

    /// Without CURVE there is no User-Id, and nothing is dropped for it.
    @Test func withoutCurveMessagesNeedNoUserID() throws {
        let shell = try Self.shell(curve: false)
        var outbound: [ZMQEventLoop.Outbound] = []
        shell.handle(
            [
                .message(Broker.workersSocket, ZMQMessage(frames: [[3]] + Self.ready)),
                .message(Broker.clientsSocket, ZMQMessage(frames: [[1]] + Self.request)),
            ], into: &outbound)
        #expect(shell.snapshot().counters.unauthenticatedMessages == 0)
        #expect(shell.snapshot().counters.requestsAccepted == 1)
    }
}

extension Broker.Shell {
    /// A batch given as a value, as the tests write them (the loop lends its own).
    fileprivate func handle(_ batch: [ZMQEventLoop.Inbound], into outbound: inout [ZMQEventLoop.Outbound]) {
        var batch = batch
        handle(&batch, into: &outbound)
    }
}
