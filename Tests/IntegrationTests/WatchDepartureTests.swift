import SkyProtocol
import Testing

@testable import skywatch

/// skywatch's departures: a worker that said goodbye with tasks still held ran out of drain
/// time, which "graceful" (drained) hid.
@Suite("skywatch: a departure's line")
struct WatchDepartureTests {
    @Test func aDrainThatRanOutOfTimeIsNotShownAsGraceful() {
        let worker = WorkerInfo(id: "01", name: "w3", capacity: 2, services: ["sky.sleep"])
        let ranOut = SkyEvent(
            seq: 1, event: .workerDisconnected, time: "12:00:00", worker: worker, reason: .graceful, tasksHeld: 2)
        #expect(WatchDisplay.departure(ranOut) == "12:00:00 w3 left: drain grace ran out, 2 task(s) sent elsewhere")
        let drained = SkyEvent(
            seq: 2, event: .workerDisconnected, time: "12:00:01", worker: worker, reason: .graceful, tasksHeld: 0)
        #expect(WatchDisplay.departure(drained) == "12:00:01 w3 left: graceful")
        let lost = SkyEvent(
            seq: 3, event: .workerDisconnected, time: "12:00:02", worker: worker, reason: .expired, tasksHeld: 1)
        #expect(WatchDisplay.departure(lost) == "12:00:02 w3 left: expired, 1 task(s) sent elsewhere")
    }
}
