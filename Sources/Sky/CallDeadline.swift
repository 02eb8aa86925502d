/// One caller's deadline for its call (``ScanOptions/deadline``, counted from when it started
/// the call), as the request table keeps it: a plain value, so that a call's entry stays
/// trivially copied and destroyed.
struct CallDeadline: Sendable, Equatable {
    var waiter: RequestTable.WaiterID
    /// On the table's clock.
    var at: Duration
    /// The caller's `options.deadline`, for the error that tells it.
    var length: Duration

    /// The deadline of `waiter`'s call, if its options give one: `length` after `start`.
    init?(_ waiter: RequestTable.WaiterID, options: ScanOptions, start: Duration) {
        guard let length = options.deadline else { return nil }
        self.waiter = waiter
        at = start + length
        self.length = length
    }
}
