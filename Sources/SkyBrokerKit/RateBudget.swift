import SkyWire

/// At most `perSecond` of something a second for each key, counting what was held back.
///
/// The broker answers misdirected peers (per port) and logs what peers send wrong (per line of
/// text) within such a budget: a peer can send as fast as the network carries its messages, and
/// neither answers nor log lines may grow with what it sends. A key's second starts with its
/// first use; what is held back in it is reported once it is over, by the next use of the key or
/// by ``endedSeconds(now:)``.
struct RateBudget<Key: Hashable & Sendable>: Sendable {
    typealias Instant = MonotonicInstant

    /// Whether one more may go now, and how many the key's previous second held back (reported
    /// once, with the first use after it).
    struct Admission: Equatable, Sendable {
        var allowed: Bool
        var heldBackBefore: Int
    }

    let perSecond: Int
    private var seconds: [Key: Second] = [:]

    private struct Second: Sendable {
        var start: Instant
        var used: Int
        var heldBack: Int
    }

    init(perSecond: Int) {
        self.perSecond = perSecond
    }

    /// Takes one use of `key` at `now`, if its second has one left.
    mutating func admit(_ key: Key, now: Instant) -> Admission {
        if var second = seconds[key], now - second.start < .seconds(1) {
            guard second.used < perSecond else {
                second.heldBack += 1
                seconds[key] = second
                return Admission(allowed: false, heldBackBefore: 0)
            }
            second.used += 1
            seconds[key] = second
            return Admission(allowed: true, heldBackBefore: 0)
        }
        let heldBack = seconds[key]?.heldBack ?? 0
        let allowed = perSecond > 0
        seconds[key] = Second(start: now, used: allowed ? 1 : 0, heldBack: allowed ? 0 : 1)
        return Admission(allowed: allowed, heldBackBefore: heldBack)
    }

    /// The keys whose second is over and held some back, with how many; their seconds are
    /// forgotten (a key is used again on a fresh second). Keys that held nothing back are
    /// forgotten too, so the table holds only keys used in the last second.
    mutating func endedSeconds(now: Instant) -> [(key: Key, heldBack: Int)] {
        let ended = seconds.filter { now - $0.value.start >= .seconds(1) }
        guard !ended.isEmpty else { return [] }
        for key in ended.keys { seconds[key] = nil }
        return ended.compactMap { $0.value.heldBack > 0 ? ($0.key, $0.value.heldBack) : nil }
    }
}
