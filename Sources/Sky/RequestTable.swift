import SkyProtocol
import SkyWire

/// The client's calls in flight, as a state machine free of sockets, tasks and clocks.
///
/// Inputs are a new call, a reply, the passing of time (`expire`), a caller giving up, and the
/// connection going up or down; each carries `now` (time since the client started) and appends
/// ``Action``s for the client to perform to the caller's ``RequestTableOutput``: a list (one per
/// wake-up of the I/O thread, as the broker's and the worker's machines keep), or the client
/// machine's list written in its own terms. Tests drive it by hand.
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
/// **Slots.** A call's request id carries its slot in the table in its low 32 bits (the other
/// 96 are random): a reply finds its call by index and one comparison, and a call is changed
/// where it lies. A dictionary keyed by request id hashed the id three times a call and copied
/// the whole entry in and out. A call whose caller chose its id (a kept call's job id) cannot
/// carry its slot (``ScanOptions/keptAs``): such ids alone are looked up in ``chosenIDs``, and only when it is not empty.
///
/// **Coalescing.** A call with `coalesce` and the same service and payload as a call in flight
/// joins it as another waiter; the remote work runs once and every waiter gets its outcome.
/// It is cancelled at the broker only when its last waiter leaves.
///
/// **Deadlines.** A caller's deadline (`options.deadline` from ``Call/startedAt``) is one more
/// bound on the call's one timer: when it passes, that caller gets ``SkyError/timeout(_:)``
/// whatever the attempts are doing, and the call is dropped at the broker once no caller is left. Here rather than as a
/// task racing the call: one timer entry the call has anyway, instead of a task, an actor and a
/// second timer per call; and no attempt is sent after the caller's time is up.
struct RequestTable {
    /// What a deadline's message says when it passed while no connection was up.
    static let noConnection = "with no connection to the broker"

    typealias WaiterID = UInt64

    /// What a call asks for.
    struct Call {
        var service: String
        var body: [UInt8]
        var options: ScanOptions
        /// The caller's trace frame: sent only while the broker is known to take it.
        var trace: [UInt8]? = nil
        /// When the caller started the call, if it waited for something before the call reached
        /// the table (what the broker takes); `nil`: when the table takes it. Its
        /// `options.deadline` counts from then.
        var startedAt: Duration? = nil
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
        var id: RequestID
        /// Start order, so that calls held for a connection go out in the order they were made;
        /// 0 in a free slot.
        var sequence: UInt64
        var call: Call
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
        /// Bumped whenever the deadline changes; older timer entries are stale.
        var generation: UInt64 = 0
        var deadline: Duration?
        /// The deadline of the caller that started the call, while it waits.
        var ownDeadline: CallDeadline?
        /// The earliest deadline of the call's waiters.
        var earliestDeadline: Duration?
        /// Some of its waiters joined it with deadlines of their own (in ``joinerDeadlines``).
        var hasJoinerDeadlines = false
        /// A kept call (``ScanOptions/keepIfAbandoned``) whose caller's deadline passed: the
        /// broker was told (CANCEL), and its answer (kept as a job, or why not) ends the call.
        var abandoning = false

        /// What a new slot holds (``vacate(_:)`` makes a finished call's like it). Not an
        /// optional entry: reading a field of one copied the whole entry to look at its tag.
        static let vacant = Entry(
            id: RequestID(high: 0, low: 0), sequence: 0, call: Call(service: "", body: [], options: ScanOptions()),
            waiters: [])

        var isLive: Bool { sequence != 0 }
    }

    private struct FlightKey: Hashable {
        var service: String
        var body: [UInt8]
    }

    /// A call's deadline in the timer queue. Ordered by whole nanoseconds: the queue compares on every
    /// insert and removal, and `Duration`'s `Int128` comparison is a call each time.
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
    /// The calls by slot (see "Slots" above); ``Entry/vacant`` in a free slot.
    private var slots: [Entry] = []
    /// Free slots, the last freed first.
    private var freeSlots: [UInt32] = []
    /// Calls in flight: the slots not free.
    var callCount: Int { slots.count - freeSlots.count }
    private var flights: [FlightKey: RequestID] = [:]
    /// Made with room for ``room`` callers, as the slots; above it, it grows as usual.
    private var callOfWaiter = WaiterIndex(room: room)
    static let room = 1024
    private var timers = ExpiryQueue<Timer>()
    /// The deadlines of callers that joined a call in flight (coalescing), each its own: rare,
    /// so kept here rather than in every entry.
    private var joinerDeadlines: [WaiterID: CallDeadline] = [:]
    private var connection = Connection.down(since: .zero)
    private var endpointIndex = 0
    private var failoverAt: Duration?
    /// When the current endpoint was taken.
    private var endpointSince: Duration = .zero
    /// How long an endpoint of several that refused a connection is still tried: a standby
    /// broker binds nothing, so a refusal says "try the next", but not in a tight loop when
    /// every endpoint refuses (both brokers down).
    static let refusedEndpointDwell = Duration.milliseconds(100)
    private var random: SplitMix64
    /// The slots of calls in flight whose callers chose their ids (``ScanOptions/keptAs``).
    private var chosenIDs: [RequestID: Int] = [:]
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
        endpointSince = now
        if endpointCount > 1 { failoverAt = now + connectTimeout }
        slots.reserveCapacity(Self.room)
        freeSlots.reserveCapacity(Self.room)
    }

    // MARK: Queries

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

    /// A caller starts a call. Its request id is `random`'s top 96 bits and the call's slot
    /// (unless the call joins an equal one); ``requestID(of:)`` tells it.
    mutating func start(
        _ call: consuming Call, random: RequestID, waiter: WaiterID, now: Duration,
        into actions: inout some RequestTableOutput
    ) {
        counters.calls += 1
        // The key only for a call that may coalesce: it holds the service and body.
        let key = call.options.coalesce ? FlightKey(service: call.service, body: call.body) : nil
        if let key, let leader = flights[key], let slot = slot(of: leader) {
            slots[slot].waiters.append(waiter)
            callOfWaiter[waiter] = leader
            counters.coalesced += 1
            if let own = CallDeadline(waiter, options: call.options, start: call.startedAt ?? now) {
                joinerDeadlines[waiter] = own
                slots[slot].hasJoinerDeadlines = true
                if slots[slot].earliestDeadline.map({ own.at < $0 }) ?? true {
                    slots[slot].earliestDeadline = own.at
                    schedule(slot)
                }
            }
            return
        }
        // Its time went on what came before (asking the broker what it takes).
        if let startedAt = call.startedAt, let length = call.options.deadline, startedAt + length <= now {
            counters.deadlinesPassed += 1
            actions.append(
                .fail(
                    WaiterList(waiter), .timeout("the call's deadline of \(Self.seconds(length)) passed"), attempts: 0))
            return
        }
        let chosenID = call.options.keptAs?.requestID
        if let chosen = chosenID, slot(of: chosen) != nil {
            actions.append(
                .fail(
                    WaiterList(waiter),
                    .invalidTask(
                        "a call kept as job \(JobID(chosen)) is in flight already: give each call its own id (JobID.random())"
                    ),
                    attempts: 0))
            return
        }
        let slot = takeSlot()
        let id: RequestID
        if let chosen = chosenID {
            id = chosen
            chosenIDs[chosen] = slot
        } else {
            id = RequestID(high: random.high, low: random.low & ~Self.slotMask | UInt64(slot))
        }
        nextSequence += 1
        // The call moved into its slot: its only home from here on, where it is changed in place.
        Self.fill(
            &slots[slot], id: id, sequence: nextSequence, call: consume call, waiter: waiter, flight: key, now: now)
        if let key { flights[key] = id }
        callOfWaiter[waiter] = id
        beginAttempt(slot, now: now, into: &actions)
    }

    /// A reply arrived.
    mutating func received(_ reply: TaskReply, now: Duration, into actions: inout some RequestTableOutput) {
        guard let slot = slot(of: reply.requestID) else {
            counters.unmatchedReplies += 1
            return
        }
        if slots[slot].abandoning || reply.status == .keptAsJob {
            // Whatever the broker answers a kept call's caller ends it: the job's id, a
            // result that came first, or why it could not be kept.
            let outcome: Action =
                reply.status == .ok
                ? .succeed(slots[slot].waiters, body: reply.body, attempts: slots[slot].attempts)
                : .fail(
                    slots[slot].waiters, SkyError(failure: reply, service: slots[slot].call.service),
                    attempts: slots[slot].attempts)
            finish(slot, outcome, into: &actions)
            return
        }
        if reply.status == .ok {
            if slots[slot].phase == .sent, reply.attempt != slots[slot].wireAttempt {
                // A newer attempt is out as a separate request; it is no longer needed.
                actions.append(.cancel(reply.requestID))
            }
            finish(
                slot, .succeed(slots[slot].waiters, body: reply.body, attempts: slots[slot].attempts),
                into: &actions)
            return
        }
        guard slots[slot].phase == .sent, reply.attempt == slots[slot].wireAttempt else {
            counters.staleReplies += 1
            return
        }
        attemptFailed(slot, SkyError(failure: reply, service: slots[slot].call.service), now: now, into: &actions)
    }

    /// Time passed: attempts time out, backoffs end, a silent endpoint is given up for the next.
    mutating func expire(now: Duration, into actions: inout some RequestTableOutput) {
        if let failover = failoverAt, failover <= now {
            if connection == .up {
                failoverAt = nil
            } else {
                endpointIndex = (endpointIndex + 1) % endpointCount
                failoverAt = now + connectTimeout
                endpointSince = now
                actions.append(.switchEndpoint(endpointIndex))
            }
        }
        let nowNanoseconds = now.wholeNanoseconds
        while let top = timers.min, top.nanoseconds <= nowNanoseconds {
            timers.removeMin()
            guard let slot = slot(of: top.id), slots[slot].generation == top.generation else { continue }
            if let due = slots[slot].earliestDeadline, due <= now {
                deadlinePassed(slot, now: now, into: &actions)
                continue
            }
            let attempts = slots[slot].attempts
            if slots[slot].abandoning {
                finish(
                    slot,
                    .fail(
                        slots[slot].waiters,
                        .timeout(
                            "the call's deadline passed and the broker did not confirm within \(Self.seconds(Self.keepConfirmation)) that it kept the call; it may be kept as job \(JobID(top.id))"
                        ), attempts: attempts), into: &actions)
                continue
            }
            switch slots[slot].phase {
            case .backingOff:
                slots[slot].attempts += 1
                slots[slot].wireAttempt += 1
                counters.retries += 1
                beginAttempt(slot, now: now, into: &actions)
            case .sent, .held:
                let error: SkyError
                if case .down(let since) = connection {
                    error = .brokerUnreachable(
                        "no connection to the broker for \(Self.seconds(now - since)) (attempt \(attempts))"
                            + (unreachableHint.map { ": \($0)" } ?? ""))
                } else {
                    counters.attemptTimeouts += 1
                    let timeout = slots[slot].call.options.timeout ?? .zero
                    error = .timeout("no reply within \(Self.seconds(timeout)) (attempt \(attempts))")
                    // Drop the attempt at the broker, so that a retry is a fresh request there.
                    actions.append(.cancel(top.id))
                }
                attemptFailed(slot, error, now: now, into: &actions)
            }
        }
    }

    /// A message from the broker that is not a Sky reply was dropped; returns whether it is the
    /// first (the one worth a log line: a broker that floods garbage would flood the log too).
    mutating func malformedMessage() -> Bool {
        counters.malformedMessages += 1
        return counters.malformedMessages == 1
    }

    /// A caller stopped waiting (its task was cancelled). The call is cancelled at the broker once
    /// no caller waits for it.
    mutating func abandon(_ waiter: WaiterID, into actions: inout some RequestTableOutput) {
        guard let id = callOfWaiter.removeValue(forKey: waiter), let slot = slot(of: id) else { return }
        slots[slot].waiters.remove(waiter)
        forgetDeadline(of: waiter, in: slot)
        guard slots[slot].waiters.isEmpty else {
            // The call's timer may have been set for the deadline that left: a timer that fires
            // is taken to mean the attempt's time is up.
            let earliest = slots[slot].earliestDeadline
            updateEarliestDeadline(slot)
            if slots[slot].earliestDeadline != earliest { schedule(slot) }
            return
        }
        let wasSent = slots[slot].phase == .sent
        release(slot)
        if wasSent && connection == .up { actions.append(.cancel(id)) }
    }

    /// A connection to the broker is ready (the first, or again after a loss).
    mutating func connectionUp(now: Duration, into actions: inout some RequestTableOutput) {
        connection = .up
        failoverAt = nil
        let inOrder = slots.indices.filter { slots[$0].isLive }.sorted { slots[$0].sequence < slots[$1].sequence }
        for slot in inOrder {
            if slots[slot].abandoning {
                // Not sent again: its caller is gone, and the broker kept it or holds it until
                // its own deadline, when it keeps it.
                let id = slots[slot].id
                finish(
                    slot,
                    .fail(
                        slots[slot].waiters,
                        .timeout(
                            "the call's deadline passed and the connection to the broker dropped before it confirmed keeping the call; it may be kept as job \(JobID(id))"
                        ), attempts: slots[slot].attempts), into: &actions)
                continue
            }
            switch slots[slot].phase {
            case .sent:
                // Out on a connection that is gone; the broker may never have seen it.
                slots[slot].wireAttempt += 1
                counters.resentAfterReconnect += 1
                send(slot, now: now, into: &actions)
            case .held:
                send(slot, now: now, into: &actions)
            case .backingOff:
                continue
            }
            slots[slot].unreachableSince = nil
            schedule(slot)
        }
    }

    /// The connection to the broker is lost; calls wait for the next one.
    mutating func connectionDown(now: Duration) {
        guard connection == .up else { return }
        connection = .down(since: now)
        connectionEpoch += 1
        // With several endpoints the next is tried at once: the broker that was active is gone
        // (killed, or stepped down), and another may be taking over.
        if endpointCount > 1 { failoverAt = now }
        for slot in slots.indices where slots[slot].isLive && slots[slot].phase == .sent {
            slots[slot].unreachableSince = now
            schedule(slot)
        }
    }

    /// The current endpoint refused a connection (nothing listens there: a standby broker binds
    /// nothing): with several endpoints the next is tried soon, not after `connectTimeout`.
    mutating func endpointRefused(now: Duration) {
        guard endpointCount > 1, connection != .up else { return }
        let soon = max(now, endpointSince + Self.refusedEndpointDwell)
        if failoverAt.map({ soon < $0 }) ?? true { failoverAt = soon }
    }

    /// The client is closing: every call fails.
    mutating func closeAll(into actions: inout some RequestTableOutput) {
        failAll(.clientClosed, into: &actions)
    }

    /// Ends every call with `error` (the client closed, or the broker refused its credentials).
    /// Ends every call with `error`; `cancelling`: a call out on the connection is also
    /// cancelled at the broker (the client closes), as an abandoned call is.
    mutating func failAll(_ error: SkyError, cancelling: Bool = false, into actions: inout some RequestTableOutput) {
        for slot in slots.indices where slots[slot].isLive {
            if cancelling, slots[slot].phase == .sent, connection == .up { actions.append(.cancel(slots[slot].id)) }
            finish(slot, .fail(slots[slot].waiters, error, attempts: slots[slot].attempts), into: &actions)
        }
    }

    /// The broker answered `mmi.features` with the trace feature during connection `epoch`.
    mutating func brokerTakesTrace(epoch: UInt64) {
        traceEpoch = epoch
    }

    // MARK: Steps (each on a call in its slot, in place)

    private mutating func beginAttempt(_ slot: Int, now: Duration, into actions: inout some RequestTableOutput) {
        slots[slot].attemptDeadline = slots[slot].call.options.timeout.map { now + $0 }
        if connection == .up {
            slots[slot].unreachableSince = nil
            send(slot, now: now, into: &actions)
        } else {
            slots[slot].phase = .held
            slots[slot].unreachableSince = now
        }
        schedule(slot)
    }

    private mutating func send(_ slot: Int, now: Duration, into actions: inout some RequestTableOutput) {
        counters.attemptsSent += 1
        let grace = noWorkersGraceMilliseconds
        let withTrace = traceEpoch == connectionEpoch
        actions.append(.send(Self.sendAttempt(&slots[slot], noWorkersGrace: grace, withTrace: withTrace, now: now)))
    }

    /// Marks the call's attempt sent; the request that sends it. Its timeout is what is left of
    /// the attempt's, or of its caller's deadline if that comes first (a call that no other
    /// caller joined): the broker then knows how long the caller waits, and answers a wait it
    /// cannot meet (a rate limit's) at once.
    private static func sendAttempt(
        _ entry: inout Entry, noWorkersGrace: UInt32, withTrace: Bool, now: Duration
    ) -> TaskRequest {
        entry.phase = .sent
        var until = entry.attemptDeadline
        if let own = entry.ownDeadline?.at, entry.waiters.count == 1, until.map({ own < $0 }) ?? true { until = own }
        let timeout = until.map { UInt32(clamping: max(1, ($0 - now).wholeMilliseconds)) } ?? 0
        var request = TaskRequest(
            requestID: entry.id, service: entry.call.service,
            header: RequestHeader(
                attempt: entry.wireAttempt, timeoutMilliseconds: timeout, noWorkersGraceMilliseconds: noWorkersGrace,
                priority: entry.call.options.priority.rawValue, keepIfAbandoned: entry.call.options.keepIfAbandoned),
            body: entry.call.body, trace: withTrace ? entry.call.trace : nil)
        if let key = entry.call.options.concurrencyKey {
            request.concurrencyKey = key
            request.concurrencyLimit = UInt32(clamping: entry.call.options.concurrencyLimit ?? 0)
        }
        return request
    }

    /// The deadline of some of the call's waiters passed: they get ``SkyError/timeout(_:)``,
    /// and the call is dropped at the broker once no waiter is left.
    private mutating func deadlinePassed(_ slot: Int, now: Duration, into actions: inout some RequestTableOutput) {
        let attempts = slots[slot].attempts
        if slots[slot].call.options.keepIfAbandoned, slots[slot].phase == .sent, connection == .up {
            // A kept call is left, not dropped: the broker records it as a job and says so.
            slots[slot].abandoning = true
            slots[slot].ownDeadline = nil
            slots[slot].earliestDeadline = nil
            slots[slot].attemptDeadline = now + Self.keepConfirmation
            counters.deadlinesPassed += 1
            actions.append(.cancel(slots[slot].id))
            schedule(slot)
            return
        }
        let due = slots[slot].waiters.compactMap { waiter in
            deadline(of: waiter, in: slot).flatMap { $0.at <= now ? $0 : nil }
        }
        // Without a connection the cause is the broker, not the task or the workers: said (and
        // ``SkyError``'s advice names skybroker only then), so
        // that a deadline shorter than the connect timeout does not hide a wrong endpoint.
        var offline = ""
        if case .down(let since) = connection {
            offline =
                " \(Self.noConnection) for \(Self.seconds(now - since))"
                + (unreachableHint.map { " (\($0))" } ?? "")
        }
        for deadline in due {
            callOfWaiter[deadline.waiter] = nil
            slots[slot].waiters.remove(deadline.waiter)
            forgetDeadline(of: deadline.waiter, in: slot)
            counters.deadlinesPassed += 1
            let length = Self.seconds(deadline.length)
            actions.append(
                .fail(
                    WaiterList(deadline.waiter),
                    .timeout("the call's deadline of \(length) passed\(offline) (attempt \(attempts))"),
                    attempts: attempts))
        }
        updateEarliestDeadline(slot)
        if slots[slot].waiters.isEmpty {
            let wasSent = slots[slot].phase == .sent
            let id = slots[slot].id
            release(slot)
            // Dropped at the broker, as an attempt that timed out is: no worker goes on with it.
            if wasSent && connection == .up { actions.append(.cancel(id)) }
        } else {
            schedule(slot)
        }
    }

    /// `waiter`'s deadline for the call in `slot`, if it has one.
    private func deadline(of waiter: WaiterID, in slot: Int) -> CallDeadline? {
        if let own = slots[slot].ownDeadline, own.waiter == waiter { return own }
        return slots[slot].hasJoinerDeadlines ? joinerDeadlines[waiter] : nil
    }

    /// `waiter` no longer waits for the call in `slot`: its deadline goes.
    private mutating func forgetDeadline(of waiter: WaiterID, in slot: Int) {
        if slots[slot].ownDeadline?.waiter == waiter {
            slots[slot].ownDeadline = nil
        } else if slots[slot].hasJoinerDeadlines {
            joinerDeadlines[waiter] = nil
        }
    }

    private mutating func updateEarliestDeadline(_ slot: Int) {
        var earliest = slots[slot].ownDeadline?.at
        if slots[slot].hasJoinerDeadlines {
            for waiter in slots[slot].waiters {
                if let joined = joinerDeadlines[waiter] { earliest = min(earliest ?? joined.at, joined.at) }
            }
        }
        slots[slot].earliestDeadline = earliest
    }

    private mutating func attemptFailed(
        _ slot: Int, _ error: SkyError, now: Duration, into actions: inout some RequestTableOutput
    ) {
        let attempts = slots[slot].attempts
        let retry = slots[slot].call.options.retry
        guard retry.shouldRetry(error, afterAttempt: attempts) else {
            finish(slot, .fail(slots[slot].waiters, error, attempts: attempts), into: &actions)
            return
        }
        let delay = retry.backoff(afterAttempt: attempts, using: &random)
        slots[slot].phase = .backingOff(until: now + delay)
        slots[slot].unreachableSince = nil
        schedule(slot)
    }

    /// Re-arms the call's one timer at its current deadline.
    private mutating func schedule(_ slot: Int) {
        if let timer = Self.rearm(&slots[slot], connectTimeout: connectTimeout) { timers.insert(timer) }
        // Timers of finished calls leave the queue only when they come due; with many short
        // calls and long timeouts they would pile up, so drop the stale ones now and then.
        if timers.count > 1024 && timers.count > 4 * (callCount + 1) {
            var kept = ExpiryQueue<Timer>()
            swap(&kept, &timers)
            kept.removeAll { generation(of: $0.id) != $0.generation }
            timers = kept
        }
    }

    /// The entry's new deadline and generation; its timer, if it has a deadline.
    private static func rearm(_ entry: inout Entry, connectTimeout: Duration) -> Timer? {
        entry.generation += 1
        var deadline: Duration?
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
        if let callDeadline = entry.earliestDeadline, deadline.map({ callDeadline < $0 }) ?? true {
            deadline = callDeadline
        }
        entry.deadline = deadline
        return deadline.map { Timer(deadline: $0, id: entry.id, generation: entry.generation) }
    }

    /// Timers held, stale ones included (for tests).
    var timerCount: Int { timers.count }

    /// Calls the table holds before its storage grows (for tests).
    var roomForCalls: Int { min(slots.capacity, freeSlots.capacity, callOfWaiter.capacity) }

    /// The request id of the call `waiter` waits for (for tests: the table makes the ids).
    func requestID(of waiter: WaiterID) -> RequestID? { callOfWaiter[waiter] }

    /// Ends the call in `slot` with `outcome`, for all its waiters.
    private mutating func finish(_ slot: Int, _ outcome: consuming Action, into actions: inout some RequestTableOutput)
    {
        for waiter in slots[slot].waiters { callOfWaiter[waiter] = nil }
        release(slot)
        actions.append(consume outcome)
    }

    /// A call's timer generation, read in place.
    private func generation(of id: RequestID) -> UInt64? {
        guard let slot = slot(of: id) else { return nil }
        return slots[slot].generation
    }

    // MARK: Slots

    private static let slotMask: UInt64 = 0xffff_ffff
    /// How long a kept call's caller waits, after its deadline, for the broker to say it kept
    /// the call (one journal commit, usually milliseconds).
    static let keepConfirmation: Duration = .seconds(5)

    /// The slot of the call in flight under `id`; nil for an id that names none (finished, or
    /// never this client's). Inlined: called from a mutating input, it was handed a copy of
    /// the whole table (a 328-byte `memcpy` a reply).
    @inline(__always) private func slot(of id: RequestID) -> Int? {
        let slot = Int(truncatingIfNeeded: id.low & Self.slotMask)
        guard slot < slots.count, slots[slot].isLive, slots[slot].id == id else {
            return chosenIDs.isEmpty ? nil : chosenIDs[id]
        }
        return slot
    }

    private mutating func takeSlot() -> Int {
        if let free = freeSlots.popLast() { return Int(free) }
        precondition(slots.count <= Int(UInt32.max), "more than 2^32 calls in flight")
        slots.append(.vacant)
        return slots.count - 1
    }

    /// Frees `slot` (and the call's place among the calls that may be joined).
    private mutating func release(_ slot: Int) {
        if let flight = slots[slot].flight, flights[flight] == slots[slot].id {
            flights[flight] = nil
        }
        if slots[slot].hasJoinerDeadlines {
            for waiter in slots[slot].waiters { joinerDeadlines[waiter] = nil }
        }
        if slots[slot].call.options.keptAs != nil { chosenIDs[slots[slot].id] = nil }
        Self.vacate(&slots[slot])
        freeSlots.append(UInt32(slot))
    }

    /// A new call in a free slot, set field by field where it lies: a whole entry built and
    /// stored, or a vacant one stored over a finished call, was copied two or three times on the
    /// way (over 300 bytes each).
    private static func fill(
        _ entry: inout Entry, id: RequestID, sequence: UInt64, call: consuming Call, waiter: WaiterID,
        flight: FlightKey?, now: Duration
    ) {
        entry.id = id
        entry.sequence = sequence
        entry.call = consume call
        entry.waiters = WaiterList(waiter)
        entry.flight = flight
        entry.wireAttempt = 1
        entry.attempts = 1
        entry.phase = .held
        entry.attemptDeadline = nil
        entry.unreachableSince = nil
        entry.deadline = nil
        entry.ownDeadline = CallDeadline(waiter, options: entry.call.options, start: entry.call.startedAt ?? now)
        entry.earliestDeadline = entry.ownDeadline?.at
        entry.hasJoinerDeadlines = false
        entry.abandoning = false
    }

    /// Marks the entry free and lets go of what it holds (the call's service, body and trace).
    private static func vacate(_ entry: inout Entry) {
        entry.sequence = 0
        entry.call.service = ""
        entry.call.body = []
        entry.call.trace = nil
        entry.waiters = WaiterList()
        entry.flight = nil
    }

    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.wholeMilliseconds
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(Double(milliseconds) / 1000) s"
    }
}
