import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

/// Holds the model and pushes its state to the open pages: at most four times a second
/// whatever the event rate, encoded once per push however many pages watch, and each page
/// keeps only the newest state it has not taken yet (a slow browser costs no memory).
actor Dashboard {
    /// Pages watching live at most; more are refused (each holds a socket and a task).
    static let maxWatchers = 64
    static let pushInterval = Duration.milliseconds(250)

    private var model: DashboardModel
    private var watchers: [UUID: AsyncStream<String>.Continuation] = [:]
    private var pushes = Throttle(interval: pushInterval)

    init(model: DashboardModel) {
        self.model = model
    }

    /// The state as JSON, as `GET /api/state` and every push carry it.
    func stateJSON() -> String {
        Self.encode(model.state)
    }

    func apply(_ change: ClusterEvent) {
        model.apply(change)
        schedulePush()
    }

    /// The charts' data: the last hour of `service` (nil: all together), and the services
    /// there is history of.
    func historyJSON(of service: String?) -> String {
        struct History: Encodable {
            var service: String?
            var bucketSeconds: Int64
            var services: [String]
            var points: [ServiceHistory.Bucket]
        }
        let history = model.history
        let body = History(
            service: service, bucketSeconds: ServiceHistory.bucketSeconds, services: history.services,
            points: history.points(of: service, at: Date()))
        return Self.encode(body)
    }

    func checkBroker() {
        if model.checkBroker() { schedulePush() }
    }

    /// A page's live stream: the present state at once, then each change. Nil when too many
    /// pages watch already.
    func watch() -> (id: UUID, states: AsyncStream<String>)? {
        guard watchers.count < Self.maxWatchers else { return nil }
        let id = UUID()
        let (stream, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(1))
        continuation.yield(stateJSON())
        watchers[id] = continuation
        return (id, stream)
    }

    func stopWatching(_ id: UUID) {
        watchers.removeValue(forKey: id)?.finish()
    }

    var watcherCount: Int { watchers.count }

    private func schedulePush() {
        guard let wait = pushes.changed() else { return }
        guard wait > .zero else {
            push()
            return
        }
        Task {
            try? await Task.sleep(for: wait)
            self.scheduledPush()
        }
    }

    private func scheduledPush() {
        pushes.scheduledFired()
        push()
    }

    private func push() {
        pushes.acted()
        guard !watchers.isEmpty else { return }
        let json = stateJSON()
        for continuation in watchers.values { continuation.yield(json) }
    }

    private static func encode(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
