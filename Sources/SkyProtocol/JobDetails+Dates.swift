import Foundation

/// The job's times as `Date`s: the fields hold what the wire carries (milliseconds since 1970 on
/// the broker's clock), and every caller that showed or compared them converted them itself.
extension JobDetails {
    /// When it was submitted.
    public var submissionDate: Date? { Self.date(submittedAt) }
    /// When a scheduled job may start (``notBefore``).
    public var earliestStartDate: Date? { Self.date(notBefore) }
    /// When its latest attempt was sent to a worker (``startedAt``).
    public var startDate: Date? { Self.date(startedAt) }
    /// When it ended.
    public var endDate: Date? { Self.date(endedAt) }
    /// When its record is deleted (``expiresAt``).
    public var expirationDate: Date? { Self.date(expiresAt) }
    /// When its handler last reported progress (``progressAt``).
    public var progressDate: Date? { Self.date(progressAt) }

    private static func date(_ milliseconds: Int64?) -> Date? {
        milliseconds.map { Date(timeIntervalSince1970: Double($0) / 1000) }
    }
}
