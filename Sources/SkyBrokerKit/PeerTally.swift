/// Counts per peer, for bounds that one peer's flood may not use up for everybody (held waits).
/// A peer whose count falls to 0 is forgotten.
struct PeerTally: Sendable {
    private var counts: [PeerID: Int] = [:]

    subscript(peer: PeerID) -> Int { counts[peer, default: 0] }

    mutating func add(_ peer: PeerID) {
        counts[peer, default: 0] += 1
    }

    mutating func remove(_ peer: PeerID) {
        if let left = counts[peer], left > 1 { counts[peer] = left - 1 } else { counts[peer] = nil }
    }
}
