/// How many jobs the broker's journal has seen submitted, end each way, and retried, over its
/// whole life: the counts skywatch and skyweb show, which a restart (or a standby taking over
/// a shared store) takes up where the last broker left them. The broker saves them with its
/// journal's maintenance and when it stops, so a broker that was killed loses what it counted
/// since its last save.
public struct JobTotals: Sendable, Equatable {
    public var submitted: UInt64
    public var succeeded: UInt64
    public var failed: UInt64
    public var cancelled: UInt64
    public var retried: UInt64

    public init(
        submitted: UInt64 = 0, succeeded: UInt64 = 0, failed: UInt64 = 0, cancelled: UInt64 = 0, retried: UInt64 = 0
    ) {
        self.submitted = submitted
        self.succeeded = succeeded
        self.failed = failed
        self.cancelled = cancelled
        self.retried = retried
    }

    /// The counts as the stores keep them: signed 64-bit integers (a count past `Int64.max`,
    /// which no broker reaches, is kept as `Int64.max`).
    public var stored: [Int64] {
        [submitted, succeeded, failed, cancelled, retried].map { Int64(clamping: $0) }
    }

    /// Counts read back from ``stored``'s form; a negative one (a damaged row) reads as 0.
    public init(stored: [Int64]) {
        let values = stored.map { UInt64(max($0, 0)) } + [UInt64](repeating: 0, count: max(0, 5 - stored.count))
        self.init(
            submitted: values[0], succeeded: values[1], failed: values[2], cancelled: values[3], retried: values[4])
    }
}
