import Foundation
import Testing

@testable import SkyZMQ

/// An active broker cut off from the job store asks a standby's clients endpoint whether it
/// listens (a standby binds once it has taken over): the answer follows a real bind, and an
/// endpoint that cannot be asked says so rather than answering "not listening".
@Suite("ListenerProbe: whether another broker listens, asked without ZeroMQ")
struct ListenerProbeTests {
    @Test func aBoundRouterIsListeningAndAClosedPortIsNot() async throws {
        // Bound on every address, as a broker given `tcp://*:port` is: the standby's host
        // stands in for the wildcard.
        let (port, listening) = try await onThread { () throws -> (String, [String: Bool]) in
            let context = try ZMQContext()
            let router = try ZMQSocket(context: context, type: .router)
            try router.bind("tcp://*:*")
            let port = String(router.lastEndpoint.split(separator: ":").last ?? "")
            var listening: [String: Bool] = [:]
            for written in ["tcp://127.0.0.1:\(port)", "tcp://*:\(port)", "tcp://0.0.0.0:\(port)"] {
                listening[written] =
                    ListenerProbe(endpoint: written, host: "127.0.0.1", localHost: "here")?.isListening(
                        within: .milliseconds(500))
            }
            router.close(linger: 0)
            context.terminate()  // the port is closed once the context has ended
            return (port, listening)
        }
        #expect(listening.count == 3 && listening.values.allSatisfy { $0 }, "\(listening)")
        let closed = try #require(
            ListenerProbe(endpoint: "tcp://127.0.0.1:\(port)", host: "127.0.0.1", localHost: "here"))
        #expect(!closed.isListening(within: .milliseconds(500)))
    }

    @Test func anIPCPathIsAskedOnThisHostOnly() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sky-probe-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let endpoint = "ipc://\(directory.path)/broker"
        let probe = try #require(ListenerProbe(endpoint: endpoint, host: "here", localHost: "here"))
        #expect(!probe.isListening(within: .milliseconds(500)))
        let bound = try await onThread { () throws -> Bool in
            let context = try ZMQContext()
            let router = try ZMQSocket(context: context, type: .router)
            try router.bind(endpoint)
            defer { router.close(linger: 0) }
            return probe.isListening(within: .milliseconds(500))
        }
        #expect(bound)
        #expect(ListenerProbe(endpoint: endpoint, host: "elsewhere", localHost: "here") == nil)
    }

    @Test(
        arguments: [
            "tcp://127.0.0.1:*", "tcp://127.0.0.1:!", "tcp://127.0.0.1:0", "tcp://no-such-host.invalid:5555",
            "ipc://@abstract", "ipc://*", "inproc://sky", "tcp://127.0.0.1", "tcp://10.0.0.1;127.0.0.1:5555",
        ])
    func anEndpointThatCannotBeAskedHasNoProbe(endpoint: String) {
        #expect(ListenerProbe(endpoint: endpoint, host: "127.0.0.1", localHost: "127.0.0.1") == nil)
    }
}
