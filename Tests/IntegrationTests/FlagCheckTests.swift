import SkyCLISupport
import Testing

/// The one line a bad flag value ends a program with.
@Suite("Flag checks: the line a bad value gets")
struct FlagCheckTests {
    /// A range open above names its lower bound only: `skyctl jobs list --limit 0` was told
    /// "in 1...9223372036854775807".
    @Test func aRangeOpenAboveNamesItsLowerBoundOnly() {
        #expect {
            try FlagCheck.integer(0, "--limit", in: 1...Int.max)
        } throws: { "\($0)" == "--limit must be a whole number of at least 1, not 0" }
        #expect {
            try FlagCheck.integer(UInt32(0), "--capacity", in: 1...UInt32(65536))
        } throws: { "\($0)" == "--capacity must be a whole number in 1...65536, not 0" }
    }

    /// `skybroker --clients inproc://x` was accepted, and so was a worker connecting to it: each
    /// waited for a peer no other process can be.
    @Test func anInprocEndpointIsRefusedWithWhatToUseInstead() {
        #expect {
            try FlagCheck.endpoint("inproc://sky", "--clients", binding: true)
        } throws: {
            "\($0)"
                == "--clients inproc://sky: inproc:// joins sockets inside one process, and no other program can reach it; use ipc://PATH (this machine) or tcp://HOST:PORT"
        }
        #expect(throws: (any Error).self) { try FlagCheck.endpointList("tcp://a:1,inproc://sky", "--broker") }
        #expect(throws: Never.self) { try FlagCheck.endpoint("ipc:///tmp/sky", "--workers", binding: true) }
    }

    /// `--broker A,A` made a client and a worker take the one broker for its own standby.
    @Test func aBrokerListNamingOneEndpointTwiceIsRefused() {
        #expect {
            try FlagCheck.endpointList("tcp://a:5555,tcp://b:5555,tcp://a:5555", "--broker")
        } throws: {
            "\($0)"
                == "--broker tcp://a:5555,tcp://b:5555,tcp://a:5555 names tcp://a:5555 twice: list each broker once (the active one and its standbys)"
        }
        #expect(throws: Never.self) { try FlagCheck.endpointList("tcp://a:5555,tcp://b:5555", "--broker") }
    }
}
