import SkyProtocol

/// How the jobs (or flows) that ended since the broker started ended: counted where each end
/// is recorded, with the event that announces it.
struct EndTally: Sendable {
    var succeeded: UInt64 = 0
    var failed: UInt64 = 0
    var cancelled: UInt64 = 0

    /// Counts an end; returns its event.
    mutating func count(_ state: JobState) -> EventKind {
        switch state {
        case .succeeded:
            succeeded += 1
            return .jobSucceeded
        case .cancelled:
            cancelled += 1
            return .jobCancelled
        default:
            failed += 1
            return .jobFailed
        }
    }
}
