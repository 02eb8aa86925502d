import Foundation

/// How the processes of a run reach each other.
enum Transport: String, Codable, Sendable, CaseIterable {
    /// TCP on 127.0.0.1, ports picked by the kernel.
    case tcp
    /// Unix domain sockets in the temporary directory.
    case ipc

    /// Three endpoints to bind (clients, workers, events), fresh for each cluster.
    func endpoints(for name: String) -> [String] {
        switch self {
        case .tcp:
            return Array(repeating: "tcp://127.0.0.1:*", count: 3)
        case .ipc:
            let base = NSTemporaryDirectory() + "skybench-\(name)-\(UUID().uuidString.prefix(8))"
            return ["clients", "workers", "events"].map { "ipc://\(base)-\($0)" }
        }
    }
}

/// A run that cannot go on, with what happened.
struct BenchError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
