import Foundation
import SkyProtocol

/// Renders events for people: one line each, time first, then what happened.
enum EventFormatter {
    static func line(_ event: SkyEvent) -> String {
        var text = "\(event.time) #\(event.seq) \(event.event)"
        if let worker = event.worker {
            text +=
                " \(worker.name) [\(worker.id)] capacity=\(worker.capacity) services=\(worker.services.joined(separator: ","))"
        }
        if let reason = event.reason { text += " reason=\(reason.rawValue)" }
        if let held = event.tasksHeld { text += " tasks-held=\(held)" }
        if let workers = event.workers {
            text += " workers=\(workers.count)"
            if !workers.isEmpty { text += " (\(workers.map(\.name).joined(separator: ", ")))" }
        }
        if let queued = event.queued { text += " queued=\(queued)" }
        // A broker on a shared job store: which turn at the store it is (a takeover raises it).
        if let epoch = event.epoch { text += " epoch=\(epoch)" }
        if let schedule = event.schedule {
            text += " schedule=\(String(reflecting: schedule.name)) tick=\(schedule.tick ?? "trigger")"
        }
        if let task = event.task {
            text += " task=\(task.requestID) service=\(task.service) deliveries=\(task.deliveries)"
            if let worker = task.worker { text += " worker=\(worker)" }
            if let status = task.status { text += " status=\(status)" }
        }
        if let stats = event.stats {
            // The count once: a stats event that lists its workers said it above.
            if event.workers == nil { text += " workers=\(stats.workers)" }
            text +=
                " capacity=\(stats.capacity) queued=\(stats.queued) in-flight=\(stats.inFlight)"
                + " completed=\(stats.completed) failed=\(stats.failed ?? 0)"
                + " rate=\(String(format: "%.1f", stats.completedPerSecond))/s"
            for (name, service) in (stats.services ?? [:]).sorted(by: { $0.key < $1.key }) {
                text += " \(name):queued=\(service.queued),rate=\(String(format: "%.1f", service.completedPerSecond))/s"
                text += ",failed=\(service.failed)"
                if service.paused == true { text += ",paused" }
                if let p50 = service.p50Milliseconds, let p99 = service.p99Milliseconds {
                    text += ",p50=\(String(format: "%.1f", p50))ms,p99=\(String(format: "%.1f", p99))ms"
                }
            }
            if let dropped = stats.counters?.drops, !dropped.isEmpty {
                text += " dropped=" + dropped.map { "\($0.name):\($0.count)" }.joined(separator: ",")
            }
            if let jobs = stats.jobs {
                text +=
                    " jobs-held=\(jobs.held) jobs-submitted=\(jobs.submitted) jobs-succeeded=\(jobs.succeeded)"
                    + " jobs-failed=\(jobs.failed) jobs-cancelled=\(jobs.cancelled) journal-bytes=\(jobs.journalBytes)"
                // As the table says it: the piped lines are what `ops/sky up` keeps in its log.
                if jobs.journalFailing == true { text += " journal=FAILING" }
                if let schedules = jobs.schedules {
                    text +=
                        " schedules=\(schedules.count) schedules-paused=\(schedules.paused) fired=\(schedules.fired)"
                        + " skipped=\(schedules.skipped) next-fire=\(schedules.nextFire ?? "-")"
                }
                if let flows = jobs.flows {
                    text +=
                        " flows-held=\(flows.held) flows-succeeded=\(flows.succeeded) flows-failed=\(flows.failed)"
                        + " flows-cancelled=\(flows.cancelled)"
                }
            }
        }
        return text
    }
}
