import ArgumentParser
import Sky

/// Where the measuring client's calls run (`--client-callers`).
enum CallerPlacement: String, Codable, Sendable, ExpressibleByArgument {
    /// `async` calls from tasks on Swift's cooperative pool.
    case pool
    /// `async` calls from tasks that prefer the client's I/O thread
    /// (`withTaskExecutorPreference(client.ioThreadExecutor)`).
    case ioThread = "io-thread"
    /// The callback API (`request(service:body:options:completion:)`): each completion, run on
    /// the I/O thread, starts its lane's next call.
    case completion

    /// The placement as the reports name it.
    var place: String {
        switch self {
        case .pool: "cooperative pool"
        case .ioThread: "I/O thread"
        case .completion: "I/O thread, by completion handlers"
        }
    }

    /// The executor `async` callers prefer (nil: the pool).
    func executor(of client: SkyClient) -> (any TaskExecutor)? {
        self == .ioThread ? client.ioThreadExecutor : nil
    }
}

/// Where the skyworkers run the echo handler (`--worker-handlers`).
enum WorkerPlacement: String, Codable, Sendable, ExpressibleByArgument {
    /// A task a call on Swift's cooperative pool (`skyworker --handlers pool`).
    case pool
    /// A task a call on the worker's I/O thread (`--handlers io-thread`).
    case ioThread = "io-thread"
    /// No task: the echo registered inline, run by the I/O thread itself (`--inline-echo`).
    case inline

    /// The skyworker's flags for it.
    var arguments: [String] {
        switch self {
        case .pool: ["--handlers", "pool"]
        case .ioThread: ["--handlers", "io-thread"]
        case .inline: ["--handlers", "io-thread", "--inline-echo"]
        }
    }

    /// The placement as the reports name it.
    var place: String {
        switch self {
        case .pool: "cooperative pool"
        case .ioThread: "I/O thread"
        case .inline: "I/O thread, inline (no task)"
        }
    }
}
