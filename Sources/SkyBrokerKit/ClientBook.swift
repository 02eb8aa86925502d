/// The clients with requests at the broker, by number: a client's routing id is looked up once
/// per message it sends; its requests, their replies and its queue share go by number, an index
/// into an array (before, a dictionary keyed by the number: six hashes a task).
///
/// A number is free again once its client has nothing outstanding, and the next new client
/// takes it. A stale reference cannot mistake the new client for the old one: a queue entry of
/// a request that was answered while it waited is marked dropped, and a delivery's reply is
/// matched by its tag, worker and request id (``DeliveryBook``).
struct ClientBook: Sendable {
    typealias Number = BrokerStateMachine.ClientNumber
    typealias Record = BrokerStateMachine.ClientRecord

    /// The number the durable jobs' deliveries run under, outside the array (never freed).
    static let jobs: Number = .max

    private var numbers: [PeerID: Number] = [:]
    private var records: [Record?] = []
    private var free: [Number] = []
    private var jobsRecord: Record?
    /// The number the last lookup by routing id found: a client's requests come in runs (a
    /// batch of calls on one connection), and comparing two ids costs less than hashing one.
    /// Checked against its record, so a number freed or given to another client finds nothing.
    private var lastFound: Number?

    /// Clients known now, the jobs' record included.
    var count: Int { numbers.count + (jobsRecord == nil ? 0 : 1) }
    var isEmpty: Bool { count == 0 }

    /// The number of a known client.
    func number(of peer: PeerID) -> Number? { numbers[peer] }

    /// The number of `peer`, which becomes known if it was not.
    mutating func number(for peer: PeerID) -> Number {
        if let last = lastFound, record(last)?.peer == peer { return last }
        if let number = numbers[peer] {
            lastFound = number
            return number
        }
        let number: Number
        if let reused = free.popLast() {
            number = reused
            records[Int(number)] = Record(peer: peer)
        } else {
            number = Number(records.count)
            records.append(Record(peer: peer))
        }
        numbers[peer] = number
        return number
    }

    /// A known client's record (nil for a free number).
    @inline(__always)
    func record(_ number: Number) -> Record? {
        if number == Self.jobs { return jobsRecord }
        return Int(number) < records.count ? records[Int(number)] : nil
    }

    /// A known client's waiting requests and their bytes, read in place: ``record(_:)`` copied
    /// the whole record (its routing id's reference counted) on every request the broker took.
    func waiting(_ number: Number) -> (count: Int, bytes: Int)? {
        if number == Self.jobs { return jobsRecord.map { ($0.waiting, $0.waitingBytes) } }
        guard Int(number) < records.count, records[Int(number)] != nil else { return nil }
        return (records[Int(number)]!.waiting, records[Int(number)]!.waitingBytes)
    }

    /// Runs `change` on a known client's record in place; nil for a free number. (A closure,
    /// not a `_modify` accessor: the accessor's coroutine allocated its frame on every call.)
    @inline(__always)
    mutating func update<R>(_ number: Number, _ change: (inout Record) -> R) -> R? {
        if number == Self.jobs {
            guard jobsRecord != nil else { return nil }
            return change(&jobsRecord!)
        }
        guard Int(number) < records.count, records[Int(number)] != nil else { return nil }
        return change(&records[Int(number)]!)
    }

    /// One more job delivery runs: the jobs' record holds one more (it holds one for itself,
    /// so it is never freed).
    mutating func addJobDelivery() {
        var record = jobsRecord ?? Record(peer: PeerID([]), outstanding: 1)
        record.outstanding += 1
        jobsRecord = record
    }

    /// How many clients have requests waiting, and the one with the most (the jobs' record
    /// has none waiting). A pass over the clients: for a full queue only.
    func waitingHolders() -> (count: Int, most: (number: Number, waiting: Int)?) {
        var count = 0
        var most: (number: Number, waiting: Int)?
        for (index, record) in records.enumerated() {
            guard let waiting = record?.waiting, waiting > 0 else { continue }
            count += 1
            if waiting > most?.waiting ?? 0 { most = (Number(index), waiting) }
        }
        return (count, most)
    }

    /// Forgets a client; its number is free for the next new one.
    mutating func remove(_ number: Number) {
        guard number != Self.jobs else { return }
        guard Int(number) < records.count, let record = records[Int(number)] else { return }
        numbers[record.peer] = nil
        records[Int(number)] = nil
        free.append(number)
    }

    /// The same clients in new tables: what a large drain grew is given back.
    mutating func shrink() {
        numbers = Dictionary(uniqueKeysWithValues: Array(numbers))
        if numbers.isEmpty {
            records = []
            free = []
        }
    }
}
