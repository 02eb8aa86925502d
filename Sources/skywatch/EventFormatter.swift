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
        return text
    }
}
