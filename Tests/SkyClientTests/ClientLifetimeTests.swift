import SkyZMQ
import Testing

@testable import Sky

/// The I/O thread's handler holds the client's shell strongly (``SkyClient/HandlerTarget``: a
/// weak reference made every retain and release of the shell slow), so the client must let go
/// of it when it goes; else a client dropped without `close()` kept its connection's state.
@Suite("SkyClient: a client let go lets go of its connection")
struct ClientLifetimeTests {
    @Test func aClientDroppedWithoutCloseFreesItsShell() async throws {
        weak var shell: SkyClient.Shell?
        var loop: ZMQEventLoop?
        do {
            let sky = try await SkyClient(broker: "tcp://127.0.0.1:1")
            // Its I/O thread runs, with the shell as its handler.
            try await sky.startIfNeeded()
            shell = sky.shell
            loop = sky.shell.loop.load()
        }
        // The client went, asking its loop to stop; once stopped, the loop's thread holds no
        // copy of the shell for a wake-up in progress.
        await loop?.shutdown()
        #expect(loop != nil)
        #expect(shell == nil)
    }
}
