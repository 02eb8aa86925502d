import Foundation
import Logging
import ServiceLifecycle
import SkyWorkerKit
import UnixSignals

/// A task of our own: count the words in a text. Clients declare the same type (or one with
/// the same JSON shape) and call `sky.scan(WordCount(text: ...))`.
struct WordCount: SkyTask {
    static let service = "example.wordcount"
    typealias Result = Counts
    var text: String
}

struct Counts: Codable, Sendable {
    var words: Int
    var characters: Int
}

/// A complete worker process: `sky-example-worker [tcp://broker:5556]`.
@main
struct ExampleWorker {
    static func main() async {
        do {
            try await run()
        } catch {
            // One line and exit 1: an error thrown out of `main` would end the process with
            // "Fatal error: Error raised at top level", a backtrace and a trap (exit 132).
            FileHandle.standardError.write(Data("sky-example-worker: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let broker = CommandLine.arguments.dropFirst().first ?? "tcp://127.0.0.1:5556"
        let logger = Logger(label: "example-worker")
        let system = ScanSystem(name: "example-\(ProcessInfo.processInfo.processIdentifier)", capacity: 4)
        await system.register(WordCount.self) { task in
            Counts(words: task.text.split(whereSeparator: \.isWhitespace).count, characters: task.text.count)
        }
        let worker = SkyWorker(configuration: .init(broker: broker), system: system, logger: logger)
        let group = ServiceGroup(services: [worker], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        try await group.run()
    }
}
