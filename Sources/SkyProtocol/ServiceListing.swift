/// The answer to `mmi.services.list`: every service the broker knows (served, with work
/// waiting, or paused), by name.
public struct ServiceListing: Codable, Sendable, Equatable {
    public var services: [ServiceState]

    public init(services: [ServiceState]) {
        self.services = services
    }
}

/// One service as `mmi.services.list` shows it.
public struct ServiceState: Codable, Sendable, Equatable {
    public var name: String
    /// Workers serving it now.
    public var workers: Int
    /// Calls waiting for a worker.
    public var queued: Int
    /// Jobs waiting for a worker (queued or prepared to start).
    public var jobsQueued: Int
    /// Paused: its waiting calls and jobs wait until it is resumed (kept across restarts).
    public var paused: Bool

    public init(name: String, workers: Int, queued: Int, jobsQueued: Int, paused: Bool) {
        self.name = name
        self.workers = workers
        self.queued = queued
        self.jobsQueued = jobsQueued
        self.paused = paused
    }
}
