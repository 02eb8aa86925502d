import Logging
import SkyZMQ

/// A logger whose lines a test can wait for: what a library logs is, for some events, the
/// only sign outside it that they happened.
final class RecordedLog: Sendable {
    private let lines = Locked<[String]>([])

    /// A logger that records each message here.
    var logger: Logger {
        Logger(label: "recorded") { _ in Handler(lines: self.lines) }
    }

    /// Whether a message containing `text` was logged.
    func contains(_ text: String) -> Bool { lines.withLock { $0.contains { $0.contains(text) } } }

    private struct Handler: LogHandler {
        let lines: Locked<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            lines.withLock { $0.append("\(event.message)") }
        }
    }
}
