import Testing

@testable import SkyZMQ

/// Endpoints checked before libzmq sees them: it answers `localhost:5555` with "Invalid
/// argument" and nothing more.
@Suite("ZMQEndpoint: what libzmq can use, said before it is asked")
struct ZMQEndpointTests {
    @Test(
        arguments: [
            ("tcp://127.0.0.1:5555", false, nil),
            ("tcp://broker.example:5555", false, nil),
            ("ipc:///tmp/sky", false, nil),
            ("inproc://sky", false, nil),
            ("tcp://*:5555", true, nil),
            ("tcp://127.0.0.1:*", true, nil),
            ("localhost:5555", false, "no transport: expected tcp://, ipc:// or inproc://"),
            ("tcp://127.0.0.1", false, "no port"),
            ("tcp://:5555", false, "no host"),
            ("tcp://*:5555", false, "* as host only works when binding"),
            ("tcp://127.0.0.1:*", false, "* as port only works when binding"),
            ("tcp://127.0.0.1:70000", false, "port 70000 is not 1...65535"),
            ("tcp://127.0.0.1:0", true, "port 0 is not 1...65535 (for a free port, write * as the port)"),
            ("tcp://127.0.0.1:0", false, "port 0 is not 1...65535"),
            ("udp://127.0.0.1:5555", false, "unknown transport udp; use tcp, ipc or inproc"),
            ("ipc://", false, "no ipc path"),
        ] as [(String, Bool, String?)])
    func eachEndpointIsUsableOrSaysWhy(endpoint: String, binding: Bool, problem: String?) {
        #expect(ZMQEndpoint.problem(endpoint, binding: binding) == problem)
    }

    /// With its own host and port when it has them: a worker's `localhost:5556` was told to
    /// write `tcp://127.0.0.1:5555`, the clients port.
    @Test func theAdviceShowsHowToWriteIt() {
        #expect(
            ZMQEndpoint.advice("localhost:5556", problem: "no transport")
                == "localhost:5556 is not a ZeroMQ endpoint (no transport); write it like tcp://localhost:5556")
        #expect(
            ZMQEndpoint.advice(":5557", problem: "no transport")
                == ":5557 is not a ZeroMQ endpoint (no transport); write it like tcp://127.0.0.1:5557")
        #expect(
            ZMQEndpoint.advice("broker", problem: "no transport")
                == "broker is not a ZeroMQ endpoint (no transport); write it like tcp://127.0.0.1:5555")
    }

    @Test(
        arguments: [
            ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5555", true),
            ("tcp://*:5555", "tcp://10.0.0.1:5555", true),
            ("tcp://0.0.0.0:5555", "tcp://127.0.0.1:5555", true),
            ("tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556", false),
            ("tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555", false),
            ("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", false),
            ("ipc:///tmp/a", "ipc:///tmp/a", true),
            ("ipc:///tmp/a", "ipc:///tmp/b", false),
            ("tcp://127.0.0.1", "tcp://127.0.0.1", true),
        ] as [(String, String, Bool)])
    func twoBindingsClashOnlyOnTheSameAddress(first: String, second: String, clash: Bool) {
        #expect(ZMQEndpoint.sameBinding(first, second) == clash)
        #expect(ZMQEndpoint.sameBinding(second, first) == clash)
    }
}
