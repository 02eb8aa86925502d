import SkyProtocol

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What one service did in the current stats period: tasks answered by status, and their
/// latencies (arrival at the broker to the worker's reply) and waits (arrival to dispatch) in
/// fixed histograms, so that recording one costs a few instructions and no allocation,
/// whatever the load.
package struct ServiceWindow: Sendable, Equatable {
    var completed: UInt64 = 0
    var failed: UInt64 = 0
    /// Counts per latency bucket: bucket k holds latencies up to 2^(k/4) microseconds (four
    /// buckets per doubling: percentiles within 19 %), from 1 µs to about 18 minutes. Empty
    /// until the first latency: a window of failures the broker answered itself (a flood of
    /// requests for unknown services) stays at its status counts, 128 bytes, not 1.1 KB.
    var buckets: [UInt32] = []
    /// Requests' waits from arrival to dispatch to a worker (recorded with their replies), in
    /// the same buckets; empty until the first.
    var waitBuckets: [UInt32] = []
    /// Answers per reply status (indexed by its raw value; unknown statuses in the last slot).
    var statuses = [UInt64](repeating: 0, count: Self.statusSlots)

    static let bucketCount = 120
    static let statusSlots = 16

    /// A worker's reply, `nanoseconds` after the request arrived; `waited` of them before it
    /// was dispatched (nil for a job's delivery).
    mutating func record(nanoseconds: Int64, status: ReplyStatus, waited: Int64? = nil) {
        completed += 1
        count(status)
        if buckets.isEmpty { buckets = [UInt32](repeating: 0, count: Self.bucketCount) }
        buckets[Self.bucket(nanoseconds)] &+= 1
        if let waited {
            if waitBuckets.isEmpty { waitBuckets = [UInt32](repeating: 0, count: Self.bucketCount) }
            waitBuckets[Self.bucket(waited)] &+= 1
        }
    }

    /// A failure the broker answered itself (deadline, no workers, lost workers): no latency.
    mutating func recordFailure(_ status: ReplyStatus) {
        count(status)
    }

    private mutating func count(_ status: ReplyStatus) {
        if status != .ok { failed += 1 }
        statuses[min(Int(status.rawValue), Self.statusSlots - 1)] += 1
    }

    /// `⌈4 log₂ µs⌉`, from the value's binary exponent (its leading zeros) and a comparison of
    /// its significand, shifted to the top bit, with the quarter powers of two as integers: not
    /// two `log2` calls a task, nor `Double`'s `significand` and `exponent`, which are not inlined.
    static func bucket(_ nanoseconds: Int64) -> Int {
        let microseconds = UInt64(max(1, nanoseconds / 1000))
        let zeros = microseconds.leadingZeroBitCount
        let significand = microseconds << zeros
        let quarter: Int
        switch significand {
        case 1 << 63: quarter = 0
        case ...Self.quarterPowers.0: quarter = 1
        case ...Self.quarterPowers.1: quarter = 2
        case ...Self.quarterPowers.2: quarter = 3
        default: quarter = 4
        }
        return min(bucketCount - 1, 4 * (63 - zeros) + quarter)
    }

    /// 2^(1/4), 2^(2/4) and 2^(3/4) (as `Double`s) times 2^63: exact integers, written out because
    /// a computed `static let` is an initialisation check on every read.
    static let quarterPowers: (UInt64, UInt64, UInt64) = (
        0x9837_f051_8db8_a800, 0xb504_f333_f9de_6800, 0xd744_fcca_d69d_6800
    )

    /// The largest latency bucket `bucket` holds, in nanoseconds.
    static func upperBoundNanoseconds(_ bucket: Int) -> Double { exp2(Double(bucket) / 4) * 1000 }

    /// The upper bound of the bucket holding the `fraction` quantile, in milliseconds.
    func quantileMilliseconds(_ fraction: Double) -> Double? {
        let total = buckets.reduce(0) { $0 + UInt64($1) }
        guard total > 0 else { return nil }
        let rank = UInt64((Double(total) * fraction).rounded(.up))
        var seen: UInt64 = 0
        for (bucket, count) in buckets.enumerated() {
            seen += UInt64(count)
            if seen >= max(1, rank) { return Self.upperBoundNanoseconds(bucket) / 1_000_000 }
        }
        return nil
    }
}

extension ServiceWindow? {
    /// Records into the window, which starts if the period had none.
    mutating func record(_ change: (inout ServiceWindow) -> Void) {
        // Matched, not compared with `nil`: the comparison copied the window (a retain of each
        // of its arrays), once per reply.
        if case .none = self { self = ServiceWindow() }
        change(&self!)
    }
}
