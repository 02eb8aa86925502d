import HeapModule

/// A min-queue of expiry times, for timers that mostly arrive in order.
///
/// The broker's request deadlines and leases and the client's call timers are set at a fixed
/// length from "now", so each new one is almost always the latest: those go to the back of a
/// sorted run in O(1) and leave from its front in O(1), where a heap moved every insert up and
/// every removal down its levels. One that is earlier
/// than the run's last (a shorter timeout, a retry's backoff) goes to a heap beside it; the
/// minimum is the smaller of the two fronts.
///
/// Entries are removed lazily (their owner checks, when one comes due, whether it still
/// counts), so owners compact with ``removeAll(where:)``, which keeps the run's order and costs
/// one pass, where rebuilding a heap sorted it. Inlinable: unspecialised, every call looked
/// the element type's metadata up.
public struct ExpiryQueue<Element: Comparable>: Sendable where Element: Sendable {
    /// In nondecreasing order from ``head``.
    @usableFromInline var run: [Element] = []
    /// Where the run starts: entries before it have left.
    @usableFromInline var head = 0
    @usableFromInline var rest = Heap<Element>()

    @inlinable public init() {}

    /// A queue of `elements` in any order.
    @inlinable public init(_ elements: some Sequence<Element>) {
        run = elements.sorted()
    }

    /// Entries held, due or not.
    @inlinable public var count: Int { run.count - head + rest.count }

    @inlinable public var isEmpty: Bool { count == 0 }

    /// The earliest entry.
    @inlinable public var min: Element? {
        guard head < run.count else { return rest.min }
        guard let other = rest.min else { return run[head] }
        return other < run[head] ? other : run[head]
    }

    @inlinable public mutating func insert(_ element: Element) {
        if head == run.count {
            // Empty run: start it again at the array's front.
            run.removeAllKeepingBuffer()
            head = 0
            run.append(element)
        } else if !(element < run[run.count - 1]) {
            run.append(element)
        } else {
            rest.insert(element)
        }
    }

    /// Takes the earliest entry out.
    @inlinable @discardableResult
    public mutating func removeMin() -> Element? {
        guard head < run.count else { return rest.popMin() }
        if let other = rest.min, other < run[head] { return rest.popMin() }
        let first = run[head]
        head += 1
        if head == run.count {
            run.removeAllKeepingBuffer()
            head = 0
        } else if head >= 1024 && head * 2 >= run.count {
            // Left entries outnumber the ones held: drop them, one move of what is left.
            run.removeFirst(head)
            head = 0
        }
        return first
    }

    /// Every entry, in no particular order.
    @inlinable public var unordered: [Element] { Array(run[head...]) + rest.unordered }

    /// Drops the entries `shouldRemove` picks, in one pass that keeps the run in order.
    @inlinable public mutating func removeAll(where shouldRemove: (Element) throws -> Bool) rethrows {
        run.removeFirst(head)
        head = 0
        try run.removeAll(where: shouldRemove)
        if !rest.isEmpty {
            rest = Heap(try rest.unordered.filter { try !shouldRemove($0) })
        }
    }
}
