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

/// The answer to `mmi.services.keys`: the concurrency keys of one service with work waiting or
/// running under a limit, those with the most waiting first, at most
/// ``KeyListing/maxKeys``.
public struct KeyListing: Codable, Sendable, Equatable {
    public var service: String
    public var keys: [KeyState]
    /// Keys left out beyond the first ``maxKeys``.
    public var more: Int

    /// The most keys one listing shows.
    public static let maxKeys = 100

    public init(service: String, keys: [KeyState], more: Int = 0) {
        self.service = service
        self.keys = keys
        self.more = more
    }
}

/// One concurrency key of a service, as `mmi.services.keys` shows it. The key "" is the
/// service's work without a key (shown only once keyed work came: before, there are no turns).
public struct KeyState: Codable, Sendable, Equatable {
    public var key: String
    /// Calls waiting for a worker, and calls at workers that hold a place under their limit.
    public var callsWaiting: Int
    public var callsRunning: Int
    /// Jobs waiting in the queue (not yet prepared), and jobs that hold a place under their
    /// limit (prepared or running).
    public var jobsWaiting: Int
    public var jobsRunning: Int

    public init(key: String, callsWaiting: Int = 0, callsRunning: Int = 0, jobsWaiting: Int = 0, jobsRunning: Int = 0) {
        self.key = key
        self.callsWaiting = callsWaiting
        self.callsRunning = callsRunning
        self.jobsWaiting = jobsWaiting
        self.jobsRunning = jobsRunning
    }
}
