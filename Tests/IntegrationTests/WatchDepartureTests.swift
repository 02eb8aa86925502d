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

    /// The piped line says what the table says of the journal and of paused services: a
    /// failing journal (only the table and --json said it, so `ops/sky up`'s log never had it),
    /// and schedules' pauses apart from a service's.
    @Test func thePipedStatsLineSaysAFailingJournalAndWhatIsPaused() {
        var stats = BrokerStats(
            workers: 1, capacity: 4, queued: 0, inFlight: 0, completed: 0, completedPerSecond: 0, failed: 0)
        stats.services = [
            "sky.held": ServiceStats(
                queued: 2, completed: 0, failed: 0, completedPerSecond: 0, p50Milliseconds: nil, p99Milliseconds: nil,
                paused: true)
        ]
        stats.jobs = JobCounts(
            held: 6, queued: 6, submitted: 12, succeeded: 6, failed: 0, cancelled: 0, retried: 0, journalBytes: 61_440,
            schedules: ScheduleCounts(count: 1, paused: 0, fired: 0, skipped: 0, nextFire: nil), journalFailing: true)
        let line = EventFormatter.line(SkyEvent(seq: 4, event: .brokerStats, time: "12:00:00", stats: stats))
        #expect(line.contains(" workers=1 capacity=4 "), "\(line)")
        #expect(line.contains(" sky.held:queued=2,rate=0.0/s,failed=0,paused"), "\(line)")
        // With its workers listed, the count is said once ("workers=1 (w1) workers=1").
        let listed = EventFormatter.line(
            SkyEvent(
                seq: 5, event: .brokerStats, time: "12:00:01",
                workers: [WorkerInfo(id: "01", name: "w1", capacity: 4, services: ["sky.echo"])], stats: stats))
        #expect(listed.ranges(of: "workers=").count == 1, "\(listed)")
        #expect(line.contains(" journal-bytes=61440 journal=FAILING"), "\(line)")
        #expect(line.contains(" schedules=1 schedules-paused=0 "), "\(line)")
    }
}
