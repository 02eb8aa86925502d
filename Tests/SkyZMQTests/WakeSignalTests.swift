import Foundation
import Testing

@testable import SkyZMQ

/// How an I/O thread is woken, both ways: the eventfd Linux has, and the pipe of the system
/// shim's portable way (what macOS runs; the suite runs it on Linux with SKY_SYSTEM_PORTABLE=1).
@Suite("Wake signal")
struct WakeSignalTests {
    static func readable(_ fd: Int32, within milliseconds: Int32) -> Bool {
        var item = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&item, 1, milliseconds) == 1
    }

    @Test func anEventfdOnLinuxAPipeInThePortableWayAndEitherWakesAndDrains() throws {
        let forced = ProcessInfo.processInfo.environment["SKY_SYSTEM_PORTABLE"] == "1"
        #expect(SkySystem.isPortable == forced, "the shim reads SKY_SYSTEM_PORTABLE")
        let wake = try WakeSignal()
        #expect(wake.isEventFD == !forced)
        #expect(!Self.readable(wake.readFD, within: 0))
        // Several wake-ups before the thread looks: one drain empties them all.
        for _ in 0..<3 { wake.signal() }
        #expect(Self.readable(wake.readFD, within: 1000))
        wake.drain()
        #expect(!Self.readable(wake.readFD, within: 0), "drained")
        wake.signal()
        #expect(Self.readable(wake.readFD, within: 1000), "and wakes again")
    }
}
