import Foundation
import Sky
import SkyProtocol
import SkyWire

extension JobBench {
    /// What schedules cost the broker, in percent of one core over ``scheduleMeasure``: with
    /// nothing due; with ``scheduleCount`` hourly schedules, which it looks at every tick of its
    /// clock and never fires here; with as many firing every second, their jobs run by the
    /// workers; and with the same rate of jobs submitted by a client, so that what the
    /// schedules add beyond their jobs' own cost is the difference.
    func measureSchedules(_ target: SkyTarget, into results: inout Results) async throws {
        let sky = target.client
        results.schedules = scheduleCount
        progress("schedules: the broker with nothing due")
        results.brokerCPUIdle.append(try await brokerCPU(target))

        progress("schedules: \(scheduleCount) of an hour")
        try await save(sky, every: .seconds(3600))
        results.brokerCPUSchedulesNotDue.append(try await brokerCPU(target))

        progress("schedules: \(scheduleCount) of a second")
        try await save(sky, every: .seconds(1))
        // Their first ticks, and the jobs of the hourly ones replaced, settle first.
        try await Task.sleep(for: .seconds(2))
        let firedBefore = try await fired(sky)
        let started = ContinuousClock.now
        results.brokerCPUSchedulesFiring.append(try await brokerCPU(target))
        results.scheduledJobsPerSecond.append(
            Double(try await fired(sky) - firedBefore) / (ContinuousClock.now - started).inSeconds)
        try await forEachSchedule { try await sky.removeSchedule("bench-\($0)") }
        try await waitForSucceeded(try await submittedCount(sky), sky)

        progress("schedules: the same rate submitted by a client")
        let paced = Task { try await Self.submitPacedUntilCancelled(sky) }
        try await Task.sleep(for: .milliseconds(500))
        let submittedBefore = try await submittedCount(sky)
        let pacedStart = ContinuousClock.now
        results.brokerCPUPacedSubmits.append(try await brokerCPU(target))
        results.pacedSubmitsPerSecond.append(
            Double(try await submittedCount(sky) - submittedBefore) / (ContinuousClock.now - pacedStart).inSeconds)
        paced.cancel()
        _ = try await paced.value
        try await waitForSucceeded(try await submittedCount(sky), sky)
    }

    /// The broker's CPU over ``scheduleMeasure``, in percent of one core.
    private func brokerCPU(_ target: SkyTarget) async throws -> Double {
        let before = target.brokerCPUSeconds()
        let started = ContinuousClock.now
        try await Task.sleep(for: scheduleMeasure)
        return (target.brokerCPUSeconds() - before) / (ContinuousClock.now - started).inSeconds * 100
    }

    /// Saves (or replaces) the bench's schedules, 16 saves in flight.
    private func save(_ sky: SkyClient, every interval: Duration) async throws {
        try await forEachSchedule { index in
            try await sky.schedule(
                name: "bench-\(index)", every: interval, task: Self.task, options: Self.options, overlap: .allow)
        }
    }

    private func forEachSchedule(_ body: @escaping @Sendable (Int) async throws -> Void) async throws {
        let count = scheduleCount
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<16 {
                group.addTask {
                    for index in stride(from: lane, to: count, by: 16) { try await body(index) }
                }
            }
            try await group.waitForAll()
        }
    }

    private func fired(_ sky: SkyClient) async throws -> UInt64 {
        try await sky.clusterSnapshot().jobs?.schedules?.fired ?? 0
    }
}
