/// The place in a dictionary of the key looked up last, found again by comparing keys instead
/// of hashing one: a broker looks the same key up in runs (a worker's replies in one read, a
/// call's key when it may start and again when it takes its token), and comparing two keys
/// costs less than hashing one.
///
/// A dictionary's place is valid only until an entry is added or removed (using a stale one
/// stops the process), so its owner calls ``changed()`` with every such change, and a place
/// found before is not used after. Keep the dictionary `private(set)` beside it, changed only
/// through methods that call ``changed()``, so that the compiler holds every other use to them.
struct LastLookup<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private var changes: UInt64 = 0
    private var last: (key: Key, index: Dictionary<Key, Value>.Index, changes: UInt64)?

    /// Entries of the dictionary were added or removed (or it was replaced).
    mutating func changed() { changes &+= 1 }

    /// `key`'s place in `dictionary`, the one this looks up for.
    mutating func index(of key: Key, in dictionary: [Key: Value]) -> Dictionary<Key, Value>.Index? {
        if let last, last.changes == changes, last.key == key { return last.index }
        guard let index = dictionary.index(forKey: key) else { return nil }
        last = (key, index, changes)
        return index
    }
}
