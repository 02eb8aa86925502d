/// The callers waiting for one request: nearly always exactly one (more only when calls are
/// coalesced), so the first is kept inline and only the others in an array. An array of one
/// was an allocation per call.
struct WaiterList: Sequence, Equatable, ExpressibleByArrayLiteral, Sendable {
    typealias Element = RequestTable.WaiterID

    /// Empty only when `rest` is empty too.
    private var first: Element?
    private var rest: [Element] = []

    init(_ waiter: Element) {
        first = waiter
    }

    /// No waiters: what a freed slot holds (the empty literal went through a variadic array).
    init() {}

    init(arrayLiteral elements: Element...) {
        first = elements.first
        rest = Array(elements.dropFirst())
    }

    var count: Int { first == nil ? 0 : 1 + rest.count }
    var isEmpty: Bool { first == nil }

    mutating func append(_ waiter: Element) {
        if first == nil { first = waiter } else { rest.append(waiter) }
    }

    mutating func remove(_ waiter: Element) {
        rest.removeAll { $0 == waiter }
        if first == waiter { first = rest.isEmpty ? nil : rest.removeFirst() }
    }

    struct Iterator: IteratorProtocol {
        fileprivate var first: Element?
        fileprivate var rest: IndexingIterator<[Element]>

        mutating func next() -> Element? {
            if let waiter = first {
                first = nil
                return waiter
            }
            return rest.next()
        }
    }

    func makeIterator() -> Iterator { Iterator(first: first, rest: rest.makeIterator()) }

    /// The one waiter, when there is exactly one.
    var only: Element? { rest.isEmpty ? first : nil }

    static func == (lhs: WaiterList, rhs: WaiterList) -> Bool { lhs.elementsEqual(rhs) }
}
