import HeapModule

/// Whose turn it is among the concurrency keys of one service's waiting work, and how many of
/// each key's run under their limit: the rotation both ``QueuedJobs`` and ``RequestQueue`` take
/// their work in. The work itself is the caller's; this keeps the order.
///
/// Stride scheduling: each key has a *pass*; the next turn goes to the key of the highest head
/// priority with the lowest pass, and a key's pass grows by one a turn. A key that comes (or
/// comes back) takes the pass of the last turn given, so it goes before every key that has had
/// that turn already, and gets no turns for the time it was away: among keys of equal priority,
/// each waits at most one turn per other key.
///
/// A key at its limit is *parked*: it has no turn until one of its places is given up
/// (``vacate(_:head:)``). A key out of rate tokens *rests* the same way until its token is due
/// (``rest(_:)``, ``restore(_:head:)``). Turns are entries of a heap found stale, not removed, when their key
/// changed (a better head, a cancelled one): each key's live turn is the one with its generation.
struct KeyTurns: Sendable {
    /// What the rotation needs of a key's head (its best waiting work).
    struct Head: Sendable {
        var priority: Int8
        /// Its limit: it may start while fewer of its key hold places; 0 for none.
        var limit: UInt32
    }

    private struct Turn: Comparable, Sendable {
        var priority: Int8
        var pass: UInt64
        /// Among equal passes, the key that took its turn first goes first.
        var order: UInt64
        var key: String
        var generation: UInt32

        static func < (lhs: Self, rhs: Self) -> Bool {
            if lhs.priority != rhs.priority { return lhs.priority > rhs.priority }
            if lhs.pass != rhs.pass { return lhs.pass < rhs.pass }
            return lhs.order < rhs.order
        }

        static func == (lhs: Self, rhs: Self) -> Bool { lhs.order == rhs.order }
    }

    private var turns = Heap<Turn>()
    /// Each key's live turn: its generation and priority. A key without one is parked or has
    /// nothing waiting.
    private var turnOf: [String: (generation: UInt32, priority: Int8)] = [:]
    /// Each key's pass: its live turn's, or the one it will take when it gets a turn back.
    private var passOf: [String: UInt64] = [:]
    /// Work per key holding a place under its limit (started, not yet answered).
    private(set) var placed: [String: Int] = [:]
    /// The pass of the last turn given.
    private var round: UInt64 = 0
    private var generations: UInt32 = 0
    private var orders: UInt64 = 0

    /// Nothing waits and nothing holds a place.
    var isIdle: Bool { passOf.isEmpty && placed.isEmpty }

    /// Keys with a turn, parked, or holding places.
    var keyCount: Int { Set(passOf.keys).union(placed.keys).count }

    /// Work came to `key`, whose head is now `head`: the key gets a turn if it had none and is
    /// not at its limit, or a better one if its head's priority rose.
    mutating func arrived(_ key: String, head: Head) {
        if let turn = turnOf[key] {
            if head.priority > turn.priority { giveTurn(key, priority: head.priority, pass: passOf[key] ?? round) }
        } else if !isParked(key, head) {
            giveTurn(key, priority: head.priority, pass: passOf[key] ?? 0)
        }
    }

    /// The key whose turn is at the top, stale turns dropped on the way; check it against its
    /// head with ``confirm(_:head:)`` before it goes.
    mutating func top() -> String? {
        while let turn = turns.min {
            if turnOf[turn.key]?.generation == turn.generation { return turn.key }
            turns.removeMin()
        }
        return nil
    }

    /// Whether the key ``top()`` named may go, given its head now (`nil`: nothing of it
    /// waits). If not, the rotation was put right (the turn dropped, the key parked, or its turn
    /// ranked by its head's priority): ask ``top()`` again.
    mutating func confirm(_ key: String, head: Head?) -> Bool {
        guard let turn = turns.min, turn.key == key else { return false }
        guard let head else {
            turns.removeMin()
            turnOf[key] = nil
            forgetIfIdle(key)
            return false
        }
        if isParked(key, head) {
            turns.removeMin()
            turnOf[key] = nil
            return false
        }
        if head.priority != turn.priority {
            turns.removeMin()
            giveTurn(key, priority: head.priority, pass: turn.pass)
            return false
        }
        return true
    }

    /// The key ``confirm(_:head:)`` let go took its turn: its head went, holding a place if it
    /// has a limit; `next` is its head after that, if any.
    mutating func took(_ key: String, limited: Bool, next: Head?) {
        guard let turn = turns.min, turn.key == key else {
            preconditionFailure("key turns: a turn is taken only by the key confirm let go")
        }
        turns.removeMin()
        round = max(round, turn.pass)
        turnOf[key] = nil
        passOf[key] = turn.pass + 1
        if limited { placed[key, default: 0] += 1 }
        if let next {
            if !isParked(key, next) { giveTurn(key, priority: next.priority, pass: turn.pass + 1) }
        } else {
            forgetIfIdle(key)
        }
    }

    /// Each key with work waiting (`live`, by key, kept by the caller) or holding places: how
    /// much of each.
    func counts(waiting live: [String: Int]) -> [String: (waiting: Int, placed: Int)] {
        var keys: [String: (waiting: Int, placed: Int)] = [:]
        for (key, waiting) in live { keys[key, default: (0, 0)].waiting = waiting }
        for (key, placed) in placed { keys[key, default: (0, 0)].placed = placed }
        return keys
    }

    /// The key ``confirm(_:head:)`` let go may not go after all: it waits for a token of its
    /// rate limit (``KeyRateBook``). Its turn goes, its pass stays; ``restore(_:head:)`` gives
    /// it back when the token is due, so that it loses no place in the rotation.
    mutating func rest(_ key: String) {
        guard let turn = turns.min, turn.key == key else {
            preconditionFailure("key turns: only the key confirm let go rests")
        }
        turns.removeMin()
        turnOf[key] = nil
    }

    /// A key that rested may go again: it gets a turn if work of it waits (`head`) and it is
    /// not at its concurrency limit.
    mutating func restore(_ key: String, head: Head?) {
        guard let head, turnOf[key] == nil, !isParked(key, head) else { return }
        giveTurn(key, priority: head.priority, pass: passOf[key] ?? 0)
    }

    /// Work of `key` started without waiting for a turn (nothing of the service waited): it
    /// holds a place.
    mutating func placeDirectly(_ key: String) {
        placed[key, default: 0] += 1
    }

    /// Nothing of `key` waits any more (its last waiting work was cancelled or expired).
    mutating func emptied(_ key: String) {
        turnOf[key] = nil
        forgetIfIdle(key)
    }

    /// Work of `key` that held a place gave it up (it was answered, failed, or waits again);
    /// `head` is the key's head, if anything of it waits. The key gets its turn back if it was
    /// parked.
    /// - Returns: whether work of the key waits (the caller starts it then).
    @discardableResult
    mutating func vacate(_ key: String, head: Head?) -> Bool {
        if let count = placed[key], count > 1 { placed[key] = count - 1 } else { placed[key] = nil }
        guard let head else {
            forgetIfIdle(key)
            return false
        }
        if turnOf[key] == nil, !isParked(key, head) {
            giveTurn(key, priority: head.priority, pass: passOf[key] ?? 0)
        }
        return true
    }

    private func isParked(_ key: String, _ head: Head) -> Bool {
        head.limit > 0 && placed[key, default: 0] >= Int(head.limit)
    }

    /// Gives `key` a turn at `pass` (at least the current round), replacing its live turn.
    private mutating func giveTurn(_ key: String, priority: Int8, pass: UInt64) {
        generations &+= 1
        orders += 1
        let pass = max(pass, round)
        turnOf[key] = (generations, priority)
        passOf[key] = pass
        turns.insert(Turn(priority: priority, pass: pass, order: orders, key: key, generation: generations))
        // Stale turns go once they outnumber the live ones.
        if turns.count > 64 && turns.count > 2 * turnOf.count {
            turns = Heap(turns.unordered.filter { turnOf[$0.key]?.generation == $0.generation })
        }
    }

    /// Forgets a key that has no turn and no place (a parked key keeps its pass).
    private mutating func forgetIfIdle(_ key: String) {
        guard turnOf[key] == nil, placed[key] == nil else { return }
        passOf[key] = nil
    }
}
