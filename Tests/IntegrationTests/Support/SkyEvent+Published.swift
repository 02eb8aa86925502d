import Foundation
import SkyProtocol
import Testing

extension SkyEvent {
    /// How long after `start` the broker published this event, from its own timestamp
    /// (milliseconds, the broker's wall clock): not when an observer got around to reading it,
    /// which on a loaded machine can be much later.
    func published(after start: Date) throws -> Duration {
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let time = try #require(parser.date(from: self.time), "event time \(self.time)")
        return .milliseconds(Int64((time.timeIntervalSince(start) * 1000).rounded()))
    }
}
