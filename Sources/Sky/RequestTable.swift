import HeapModule
import SkyProtocol

/// The client's calls in flight, as a state machine free of sockets, tasks and clocks.
///
/// Inputs are a new call, a reply, the passing of time (`expire`), a caller giving up, and the
/// connection going up or down; each carries `now` (time since the client started) and appends
/// ``Action``s for the client to perform to the caller's list (one list per wake-up of the I/O
/// thread, as the broker's and the worker's machines do). Tests drive it by hand.
///
/// **One outcome per call.** A call is finished exactly once, by its first success or by the
/// failure that ends its retries, and is then forgotten: any later reply for its id matches
/// nothing and is counted in ``Counters/unmatchedReplies``.
///
/// **Attempts.** Every try of a call reuses its request id with a raised attempt number. A
/// success answers the call whichever attempt it names (the work is done); a failure counts only
/// if it names the attempt now outstanding. Otherwise it answers an attempt the call already
/// gave up on, and is counted in ``Counters/staleReplies``.
///
/// **Connection.** Attempts due while there is no connection are held and sent when it comes
/// up. Attempts that were out when a connection was lost are sent again (raised attempt number;
/// the broker runs a request id at most once at a time). A call that waits for a connection
/// longer than `connectTimeout` fails its attempt with ``SkyError/brokerUnreachable(_:)``.
///
/// **Coalescing.** A call with `coalesce` and the same service and payload as a call in flight
/// joins it as another waiter; the remote work runs once and every waiter gets its outcome.
/// It is cancelled at the broker only when its last waiter leaves.
struct RequestTable {
    typealias WaiterID = UInt64

    /// What a call asks for.
    struct Call {
        var service: String
        var body: [UInt8]
        var options: ScanOptions
        /// The caller's trace frame: sent only while the broker is known to take it.
        var trace: [UInt8]? = nil
    }

    enum Action: Equatable {
        /// Send this request (an attempt) to the broker.
        case send(TaskRequest)
        /// Tell the broker the request is no longer wanted.
        case cancel(RequestID)
        /// The call succeeded: resume these waiters with the result.
        case succeed(WaiterList, body: [UInt8], attempts: Int)
        /// The call failed for good.
        case fail(WaiterList, SkyError, attempts: Int)
        /// Close the connection and connect to `endpoints[index]` instead.
        case switchEndpoint(Int)
    }

    typealias Counters = ClientCounters

    private enum Phase: Equatable {
        /// The attempt went out on the current connection.
        case sent
        /// The attempt is due but there is no connection to send it on.
        case held
        /// Waiting to start the next attempt.
        case backingOff(until: Duration)
    }

    private struct Entry {
        let id: RequestID
        /// Start order, so that calls held for a connection go out in the order they were made.
        let sequence: UInt64
        let call: Call
        var waiters: WaiterList
        var flight: FlightKey?
        /// The number on the wire: raised for every send of a new attempt and every resend.
        var wireAttempt: UInt32 = 1
        /// Attempts that count against the retry policy.
        var attempts = 1
        var phase: Phase = .held
        var attemptDeadline: Duration?
        /// Since when this attempt has been waiting for a connection.
        var unreachableSince: Duration?
        /// Bumped whenever the deadline changes; older heap entries are stale.
        var generation: UInt64 = 0
        var deadline: Duration?
    }

    private struct FlightKey: Hashable {
        var service: String
        var body: [UInt8]
    }

    /// A call's deadline in the heap. Ordered by whole nanoseconds: the heap compares on every
    /// insert and removal, and `Duration`'s `Int128` comparison is a call each time (about 200
    /// instructions a call).
    private struct Timer: Comparable {
        var nanoseconds: Int64
        var id: RequestID
        var generation: UInt64

        init(deadline: Duration, id: RequestID, generation: UInt64) {
            nanoseconds = deadline.wholeNanoseconds
            self.id = id
            self.generation = generation
        }

        var deadline: Duration { .nanoseconds(nanoseconds) }

        static func < (lhs: Timer, rhs: Timer) -> Bool { lhs.nanoseconds < rhs.nanoseconds }
        static func == (lhs: Timer, rhs: Timer) -> Bool {
            lhs.nanoseconds == rhs.nanoseconds && lhs.id == rhs.id && lhs.generation == rhs.generation
        }
    }

    private enum Connection: Equatable {
        case up
        case down(since: Duration)
    }

    let connectTimeout: Duration
    let endpointCount: Int
    /// Sent in every request's header: how long the broker may wait for a worker of the
    /// service when none is connected (0: the broker's default).
    let noWorkersGraceMilliseconds: UInt32
    private(set) var counters = Counters()
    /// Both made with room for ``room`` calls: with their buckets mostly empty, a finished
    /// call's removal moves no neighbours back (Swift's dictionary rehashes each one it moves:
    /// 700 instructions a call at 256 in flight). Above it they grow as usual.
    private var entries = [RequestID: Entry](minimumCapacity: room)
    private var flights: [FlightKey: RequestID] = [:]
    private var callOfWaiter = [WaiterID: RequestID](minimumCapacity: room)
    static let room = 1024
    private var timers = Heap<Timer>()
    private var connection = Connection.down(since: .zero)
    private var endpointIndex = 0
    private var failoverAt: Duration?
    private var random: SplitMix64
    private var nextSequence: UInt64 = 0
    /// Counts lost connections: what the broker takes is known per connection (a reconnect
    /// may reach another broker, or one restarted at another version).
    private(set) var connectionEpoch: UInt64 = 0
    /// The connection epoch in which the broker said it takes trace frames.
    private var traceEpoch: UInt64?
    /// What the transport showed of the endpoint while no connection is up (nothing accepts
    /// there; or TCP, but no ZeroMQ handshake): added to `brokerUnreachable`, so that a wrong
    /// port is named, not only "no connection".
    var unreachableHint: String?

    /// - Parameters:
    ///   - connectTimeout: how long an attempt may wait for a connection, and how long one
    ///     endpoint of several is tried before the next.
    ///   - endpointCount: how many broker endpoints there are to fail over between.
    ///   - seed: seeds the backoff jitter.
    ///   - noWorkersGrace: how long the broker may wait for a worker of a call's service when
    ///     none is connected; `nil` for the broker's default.
    init(
        connectTimeout: Duration, endpointCount: Int = 1, noWorkersGrace: Duration? = nil, seed: UInt64,
        now: Duration = .zero
    ) {
        self.connectTimeout = connectTimeout
        noWorkersGraceMilliseconds = noWorkersGrace.map { UInt32(clamping: max(1, $0.wholeMilliseconds)) } ?? 0
        self.endpointCount = max(1, endpointCount)
        random = SplitMix64(seed: seed)
        connection = .down(since: now)
        if endpointCount > 1 { failoverAt = now + connectTimeout }
    }

    // MARK: Queries

    /// Calls in flight.
    var callCount: Int { entries.count }

    /// Callers waiting, coalesced ones included.
    var waiterCount: Int { callOfWaiter.count }

    var isConnected: Bool { connection == .up }

    /// How long there has been no connection (since the table was made, if never); `nil` when up.
    func disconnectedFor(now: Duration) -> Duration? {
        if case .down(let since) = connection { now - since } else { nil }
    }

    /// When ``expire(now:)`` next has something to do.
    mutating func nextDeadline() -> Duration? {
        while let top = timers.min, generation(of: top.id) != top.generation {
            timers.removeMin()
        }
        switch (timers.min?.deadline, failoverAt) {
        case (let timer?, let failover?): return min(timer, failover)
        case (let timer, let failover): return timer ?? failover
        }
    }

    // MARK: Inputs

    /// A caller starts a call with a fresh `id` (used unless the call joins an equal one).
    mutating func start(
        _ call: consuming Call, id: RequestID, waiter: WaiterID, now: Duration, into actions: inout [Action]
    ) {
        counters.calls += 1
        // The key only for a call that may coalesce: it holds the service and body.
        let key = call.options.coalesce ? FlightKey(service: call.service, body: call.body) : nil
        if let key, let leader = flights[key], entries[leader] != nil {
            entries[leader]?.waiters.append(waiter)
            callOfWaiter[waiter] = leader
            counters.coalesced += 1
            return
        }
        nextSequence += 1
        // The call moved into its entry: the entry is its only home from here on.
        var entry = Entry(id: id, sequence: nextSequence, call: call, waiters: WaiterList(waiter))
        if let key {
            entry.flight = key
            flights[key] = id
        }
        callOfWaiter[waiter] = id
        beginAttempt(&entry, now: now, into: &actions)
        entries[id] = entry
    }

    /// A reply arrived.
    mutating func received(_ reply: TaskReply, now: Duration, into actions: inout [Action]) {
        guard let index = entries.index(forKey: reply.requestID) else {
            counters.unmatchedReplies += 1
            return
        }
        if reply.status == .ok {
            // Taken out with the one lookup: no copy of the call, no second hash to remove it.
            let entry = entries.remove(at: index).value
            if entry.phase == .sent, reply.attempt != entry.wireAttempt {
                // A newer attempt is out as a separate request; it is no longer needed.
                actions.append(.cancel(entry.id))
            }
            finished(entry, .succeed(entry.waiters, body: reply.body, attempts: entry.attempts), into: &actions)
            return
        }
        var entry = entries.values[index]
        guard entry.phase == .sent, reply.attempt == entry.wireAttempt else {
            counters.staleReplies += 1
            return
        }
        attemptFailed(&entry, SkyError(failure: reply, service: entry.call.service), now: now, into: &actions)
    }

    /// Time passed: attempts time out, backoffs end, a silent endpoint is given up for the next.
    mutating func expire(now: Duration, into actions: inout [Action]) {
        if let failover = failoverAt, failover <= now {
            if connection == .up {
                failoverAt = nil
            } else {
                endpointIndex = (endpointIndex + 1) % endpointCount
                failoverAt = now + connectTimeout
                actions.append(.switchEndpoint(endpointIndex))
            }
        }
        let nowNanoseconds = now.wholeNanoseconds
        while let top = timers.min, top.nanoseconds <= nowNanoseconds {
            timers.removeMin()
            guard var entry = entries[top.id], entry.generation == top.generation else { continue }
            switch entry.phase {
            case .backingOff:
                entry.attempts += 1
                entry.wireAttempt += 1
                counters.retries += 1
                beginAttempt(&entry, now: now, into: &actions)
                entries[entry.id] = entry
            case .sent, .held:
                let error: SkyError
                if case .down(let since) = connection {
                    error = .brokerUnreachable(
                        "no connection to the broker for \(Self.seconds(now - since)) (attempt \(entry.attempts))"
                            + (unreachableHint.map { ": \($0)" } ?? ""))
                } else {
                    counters.attemptTimeouts += 1
                    error = .timeout(
                        "no reply within \(Self.seconds(entry.call.options.timeout ?? .zero)) (attempt \(entry.attempts))"
                    )
                    // Drop the attempt at the broker, so that a retry is a fresh request there.
                    actions.append(.cancel(entry.id))
                }
                attemptFailed(&entry, error, now: now, into: &actions)
            }
        }
    }

    /// A message from the broker that is not a Sky reply was dropped; returns whether it is the
    /// first (the one worth a log line: a broker that floods garbage would flood the log too).
    mutating func malformedMessage() -> Bool {
        counters.malformedMessages += 1
        return counters.malformedMessages == 1
    }

    /// A caller stopped waiting (its task was cancelled, or its deadline passed). The call is
    /// cancelled at the broker once no caller waits for it.
    mutating func abandon(_ waiter: WaiterID, into actions: inout [Action]) {
        guard let id = callOfWaiter.removeValue(forKey: waiter), var entry = entries[id] else { return }
        entry.waiters.remove(waiter)
        guard entry.waiters.isEmpty else {
            entries[id] = entry
            return
        }
        entries[id] = nil
        if let flight = entry.flight, flights[flight] == entry.id { flights[flight] = nil }
        if entry.phase == .sent && connection == .up { actions.append(.cancel(id)) }
    }

    /// A connection to the broker is ready (the first, or again after a loss).
    mutating func connectionUp(now: Duration, into actions: inout [Action]) {
        connection = .up
        failoverAt = nil
        for var entry in entries.values.sorted(by: { $0.sequence < $1.sequence }) {
            let id = entry.id
            switch entry.phase {
            case .sent:
                // Out on a connection that is gone; the broker may never have seen it.
                entry.wireAttempt += 1
                counters.resentAfterReconnect += 1
                send(&entry, into: &actions)
            case .held:
                send(&entry, into: &actions)
            case .backingOff:
                continue
            }
            entry.unreachableSince = nil
            schedule(&entry)
            entries[id] = entry
        }
    }

    /// The connection to the broker is lost; calls wait for the next one.
    mutating func connectionDown(now: Duration) {
        guard connection == .up else { return }
        connection = .down(since: now)
        connectionEpoch += 1
        if endpointCount > 1 { failoverAt = now + connectTimeout }
        for id in Array(entries.keys) {
            guard var entry = entries[id], entry.phase != .held else { continue }
            if entry.phase == .sent {
                entry.unreachableSince = now
                schedule(&entry)
            }
            entries[id] = entry
        }
    }

    /// The client is closing: every call fails.
    mutating func closeAll(into actions: inout [Action]) {
        failAll(.clientClosed, into: &actions)
    }

    /// Ends every call with `error` (the client closed, or the broker refused its credentials).
    mutating func failAll(_ error: SkyError, into actions: inout [Action]) {
        for entry in entries.values {
            finish(entry, .fail(entry.waiters, error, attempts: entry.attempts), into: &actions)
        }
    }

    // MARK: Steps

    private mutating func beginAttempt(_ entry: inout Entry, now: Duration, into actions: inout [Action]) {
        entry.attemptDeadline = entry.call.options.timeout.map { now + $0 }
        if connection == .up {
            entry.unreachableSince = nil
            send(&entry, into: &actions)
        } else {
            entry.phase = .held
            entry.unreachableSince = now
        }
        schedule(&entry)
    }

    /// The broker answered `mmi.features` with the trace feature during connection `epoch`.
    mutating func brokerTakesTrace(epoch: UInt64) {
        traceEpoch = epoch
    }

    private mutating func send(_ entry: inout Entry, into actions: inout [Action]) {
        entry.phase = .sent
        counters.attemptsSent += 1
        let timeout = entry.call.options.timeout.map { UInt32(clamping: max(1, $0.wholeMilliseconds)) } ?? 0
        actions.append(
            .send(
                TaskRequest(
                    requestID: entry.id, service: entry.call.service,
                    header: RequestHeader(
                        attempt: entry.wireAttempt, timeoutMilliseconds: timeout,
                        noWorkersGraceMilliseconds: noWorkersGraceMilliseconds,
                        priority: entry.call.options.priority.rawValue),
                    body: entry.call.body, trace: traceEpoch == connectionEpoch ? entry.call.trace : nil)))
    }

    private mutating func attemptFailed(
        _ entry: inout Entry, _ error: SkyError, now: Duration, into actions: inout [Action]
    ) {
        guard entry.call.options.retry.shouldRetry(error, afterAttempt: entry.attempts) else {
            finish(entry, .fail(entry.waiters, error, attempts: entry.attempts), into: &actions)
            return
        }
        let delay = entry.call.options.retry.backoff(afterAttempt: entry.attempts, using: &random)
        entry.phase = .backingOff(until: now + delay)
        entry.unreachableSince = nil
        schedule(&entry)
        entries[entry.id] = entry
    }

    /// Re-arms the entry's one timer at its current deadline.
    private mutating func schedule(_ entry: inout Entry) {
        entry.generation += 1
        let deadline: Duration?
        switch entry.phase {
        case .backingOff(let until):
            deadline = until
        case .sent, .held:
            let unreachable = entry.unreachableSince.map { $0 + connectTimeout }
            switch (entry.attemptDeadline, unreachable) {
            case (let attempt?, let unreachable?): deadline = min(attempt, unreachable)
            case (let attempt, let unreachable): deadline = attempt ?? unreachable
            }
        }
        entry.deadline = deadline
        if let deadline { timers.insert(Timer(deadline: deadline, id: entry.id, generation: entry.generation)) }
        // Timers of finished calls leave the heap only when they come due; with many short
        // calls and long timeouts they would pile up, so rebuild from the live calls now and then.
        if timers.count > 1024 && timers.count > 4 * (entries.count + 1) {
            timers = Heap(
                entries.values.compactMap { live in
                    live.deadline.map { Timer(deadline: $0, id: live.id, generation: live.generation) }
                })
            if let deadline { timers.insert(Timer(deadline: deadline, id: entry.id, generation: entry.generation)) }
        }
    }

    /// Timers held, stale ones included (for tests).
    var timerCount: Int { timers.count }

    /// Calls the table holds before its dictionaries grow (for tests).
    var roomForCalls: Int { min(entries.capacity, callOfWaiter.capacity) }

    private mutating func finish(_ entry: Entry, _ outcome: Action, into actions: inout [Action]) {
        entries[entry.id] = nil
        finished(entry, outcome, into: &actions)
    }

    /// The rest of ``finish(_:_:into:)`` for an entry already taken out of ``entries``.
    private mutating func finished(_ entry: Entry, _ outcome: Action, into actions: inout [Action]) {
        if let flight = entry.flight, flights[flight] == entry.id { flights[flight] = nil }
        for waiter in entry.waiters { callOfWaiter[waiter] = nil }
        actions.append(outcome)
    }

    /// A call's timer generation, read in place (the dictionary's getter copies the whole entry,
    /// its call's body and service included).
    private mutating func generation(of id: RequestID) -> UInt64? {
        guard let index = entries.index(forKey: id) else { return nil }
        return Self.read(&entries.values[index]) { $0.generation }
    }

    private static func read<R>(_ entry: inout Entry, _ field: (inout Entry) -> R) -> R { field(&entry) }

    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.wholeMilliseconds
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(Double(milliseconds) / 1000) s"
    }
}
