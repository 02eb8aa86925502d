import SkyJSON
import SkyJournal
import SkyProtocol
import SkyWire

/// Rate limits on services' starts: at most R starts a second, in bursts of at most B, for a
/// service's calls and jobs together (a token bucket each, ``TokenBucket``). Set by the broker's
/// flag (``BrokerRouting/rateLimits``) or through `mmi.limits.set`, `.remove` and `.list`
/// (kept in the journal, and taking the flag's place for their service until removed).
///
/// Work of a limited service with no token waits, a call up to its deadline, a job as long as it
/// takes: the broker wakes when the next token is due (at most every millisecond) and starts
/// it then. A call that would wait past its deadline is answered at once: `overloaded`, of type
/// `rateLimited`, with the wait it would have needed.
///
/// A limit per key (``SkyProtocol/RateLimit/key``) gives each key of the service's work a
/// bucket (``KeyRateBook``): the service's work takes turns by key, and a key without a token
/// gives up its turn until its token is due, so that it never holds up another key. A key
/// taken from the payload's field is read when the work arrives, for work without a key.
extension BrokerStateMachine {
    /// Services limited at most: each is a row in the journal and a line of the listing.
    static let maxLimitedServices = 10_000

    /// The limits the broker's flag gives, from its configuration.
    mutating func applyFlaggedLimits() {
        rates.flagged = configuration.rateLimits
        for (name, limit) in configuration.rateLimits {
            services.setLimit(name, limit, now: 0, waiting: queue.hasEntries)
        }
        // A limit given here is per key whether it says so or not.
        rates.keyFlagged = configuration.keyRateLimits.mapValues { limit in
            var limit = limit
            limit.key = limit.key ?? KeyScope()
            return limit
        }
        for (name, limit) in rates.keyFlagged { _ = jobs.book.keyRates.set(name, limit) }
    }

    /// The limits the journal held, before its unfinished jobs are taken up; one it cannot read
    /// is logged and left out (the flag's, if any, applies).
    package mutating func limitsAtStart(
        _ written: [(name: String, limit: [UInt8])], now: Instant, into actions: inout [BrokerAction]
    ) {
        var unreadable: [String] = []
        for (name, bytes) in written {
            guard let limit = try? CanonicalJSON.decode(RateLimit.self, from: bytes), limit.problem == nil,
                name.hasSuffix(RateLimitBook.journalKeySuffix) == limit.isPerKey
            else {
                unreadable.append(name)
                continue
            }
            if limit.isPerKey {
                let service = String(name.dropLast(RateLimitBook.journalKeySuffix.count))
                rates.set(service, limit, perKey: true)
                _ = jobs.book.keyRates.set(service, limit)
            } else {
                rates.set(name, limit)
                services.setLimit(name, limit, now: ticks(now), waiting: queue.hasEntries)
            }
        }
        guard !unreadable.isEmpty else { return }
        actions.append(
            .log(
                .warning, "journal: rate limits that are not a limit this broker can keep were left out",
                [
                    "count": "\(unreadable.count)", "services": "\(unreadable.prefix(10))",
                    "fix": "set them again with skyctl limits set, or remove them with skyctl limits remove",
                ]))
    }

    // MARK: Dispatch

    /// Whether `service` may start one more now (a token is there, not taken); if not, its work
    /// waits for the next token. For a service with a limit only.
    mutating func hasStart(_ service: ServiceBook.Number, now: Int64) -> Bool {
        guard services.update(service, { $0.bucket?.hasToken(now: now) }) == false else { return true }
        throttle(service, now: now)
        return false
    }

    /// Takes a token of `service` for a start, if it has a limit; `false` (the start waits) if
    /// it has no token.
    mutating func takeStart(_ service: ServiceBook.Number, now: Int64) -> Bool {
        let took = services.update(service) { entry -> Bool? in
            guard let took = entry.bucket?.take(now: now) else { return nil }
            if took { entry.limitStarted += 1 }
            return took
        }
        guard let took else { return true }
        if !took {
            throttle(service, now: now)
        }
        return took
    }

    private mutating func throttle(_ service: ServiceBook.Number, now: Int64) {
        guard let due = services[service].bucket?.due(position: 1, now: now) else { return }
        rates.throttle(service, until: due)
        jobs.throttled.insert(services[service].name)
    }

    /// Why `task`, a new call of limited `service` that cannot start now, is answered at once:
    /// the calls waiting ahead of it (of its key, for a per-key limit) would take the tokens
    /// until after its deadline.
    /// - Returns: the answer's body, or `nil` if it may wait.
    /// - Parameter keySlot: the service's slot in the per-key book, if it is limited per key.
    mutating func rateRefusal(
        _ task: QueuedRequest, _ service: ServiceBook.Number, keySlot: Int?, now: Int64
    ) -> RemoteErrorBody? {
        let expiry = queueExpiry(task)
        // Whatever a bucket holds, `ahead + 1` starts take at most that many tokens' time: a
        // deadline beyond it needs no look at the buckets (most calls, at the rates that bind
        // rarely).
        let waiting = queue.count(of: service)
        func mayWait(_ limit: RateLimit) -> Bool {
            Double(expiry - now) > Double(waiting + 1) / limit.perSecond * 1e9
        }
        if let limit = services.read(service, { $0.bucket?.limit }), !mayWait(limit) {
            let ahead = waiting
            if let due = services[service].bucket?.due(position: ahead + 1, now: now), due > expiry {
                services[service].limitRefused += 1
                return refusal(
                    "the service \(task.request.service) is limited to \(limit.rateText) (burst \(limit.burst)) and \(ahead) \(ahead == 1 ? "call waits" : "calls wait") ahead of this one",
                    wait: due - now, expiry: expiry, now: now)
            }
        }
        let name = task.request.service
        guard let keySlot, let limit = jobs.book.keyRates.limit(at: keySlot), !mayWait(limit) else { return nil }
        let key = task.request.concurrencyKey ?? ""
        let ahead = queue.waiting(service, key: key)
        let due = jobs.book.keyRates.due(at: keySlot, key: key, position: ahead + 1)
        guard due > expiry else { return nil }
        jobs.book.keyRates.refused(at: keySlot)
        return refusal(
            "the service \(name) is limited to \(limit.rateText) per key (burst \(limit.burst)) and \(ahead) calls of the key \(String(reflecting: key)) wait ahead of this one",
            wait: due - now, expiry: expiry, now: now)
    }

    private func refusal(_ reason: String, wait: Int64, expiry: Int64, now: Int64) -> RemoteErrorBody {
        let message =
            "\(reason): it would start in \(Self.seconds(wait)), after its deadline (in \(Self.seconds(max(0, expiry - now)))). Give it a longer deadline, send fewer, or raise the limit (skyctl limits set)"
        return RemoteErrorBody(
            type: RemoteErrorBody.rateLimitedType, message: message, retryAfterMs: (wait + 999_999) / 1_000_000)
    }

    /// The per-key buckets read the time of the input being handled (the queues consult them in
    /// paths that are not given it). Only while some service is limited per key.
    mutating func clockKeyRates(_ now: Instant) {
        if !jobs.book.keyRates.isEmpty { jobs.book.keyRates.now = ticks(now) }
    }

    /// Whether `service` is rate-limited per key.
    func isKeyLimited(_ name: String) -> Bool {
        !jobs.book.keyRates.isEmpty && jobs.book.keyRates.limit(of: name) != nil
    }

    /// The key a per-key limit of `service` gives work with `body` and no key of its own: the
    /// payload's field, if the limit names one.
    /// - Returns: `nil` if the work keeps the key it has (none, or its own); a failure says why
    ///   the payload gives none (the work is refused).
    @inline(__always)  // called, it copied the whole machine (2 KB) to the stack from `accept`, which mutates
    func keyFromPayload(_ service: String, _ body: [UInt8]) -> Result<String, KeyFieldProblem>? {
        guard !jobs.book.keyRates.isEmpty, let scope = jobs.book.keyRates.limit(of: service)?.key, scope.field != nil
        else { return nil }
        return scope.key(in: body, service: service)
    }

    private static func seconds(_ nanoseconds: Int64) -> String {
        let milliseconds = nanoseconds / 1_000_000
        return milliseconds < 1000 ? "\(milliseconds) ms" : "\(Double(milliseconds) / 1000) s"
    }

    /// When the broker should next wake up for a token, if work waits for one. Inlined: read
    /// at the end of every wake-up from inside the lock, it was handed a copy of the whole
    /// machine (a `memcpy` of the machine's size on every wake-up).
    @inline(__always) package var nextRateWake: Instant? {
        guard let epoch else { return nil }
        let due: Int64?
        switch (rates.nextWake, jobs.book.keyRates.nextWake) {
        case (let service?, let key?): due = min(service, key)
        case (let service, let key): due = service ?? key
        }
        return due.map { epoch + .nanoseconds($0) }
    }

    /// Time passed: services whose next token is due start their waiting work, and keys whose
    /// token is due get their turns back.
    package mutating func rateWake(now: Instant, into actions: inout [BrokerAction]) {
        let nowTicks = ticks(now)
        jobs.book.keyRates.now = nowTicks
        for service in rates.takeDue(now: nowTicks) where services.isKnown(service) {
            let name = services[service].name
            jobs.throttled.remove(name)
            startWaitingWork(of: name, now: now, into: &actions)
        }
        guard jobs.book.keyRates.nextWake.map({ $0 <= nowTicks }) == true else { return }
        var woken: [String: [String]] = [:]
        for (service, key) in jobs.book.keyRates.takeDue(now: nowTicks) { woken[service, default: []].append(key) }
        for (name, keys) in woken { restoreKeys(keys, of: name, now: now, into: &actions) }
    }

    /// Keys of `name` that rested for a token get their turns back in both queues, and its
    /// waiting work is offered to its workers.
    private mutating func restoreKeys(
        _ keys: [String], of name: String, now: Instant, into actions: inout [BrokerAction]
    ) {
        guard !keys.isEmpty else { return }
        let number = services.number(of: name)
        for key in keys {
            if let number { queue.restore(number, key: key) }
            jobs.book.queued.restore(name, key: key, in: jobs.book.jobs)
        }
        startWaitingWork(of: name, now: now, into: &actions)
    }

    // MARK: Control

    /// Answers `mmi.limits.set`, `.remove` and `.list`.
    mutating func answerLimitControl(
        _ request: TaskRequest, for peer: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) {
        let caller = JobCaller(peer: peer, requestID: request.requestID, attempt: request.header.attempt)
        func refuse(_ status: ReplyStatus, _ message: String) {
            answer(caller, status, Array("\(request.service): \(message)".utf8), failure: true, into: &actions)
        }
        if request.service == BrokerService.limitList {
            answer(caller, .ok, (try? CanonicalJSON.encode(limitListing())) ?? Array("{}".utf8), into: &actions)
            return
        }
        let name: String
        var limit: RateLimit?
        let perKey: Bool
        if request.service == BrokerService.limitSet {
            guard let given = try? CanonicalJSON.decode(ServiceRateLimit.self, from: request.body) else {
                refuse(.invalidPayload, #"the body is not a limit: give {"service":"…","perSecond":100,"burst":20}"#)
                return
            }
            if let problem = given.limit.problem {
                refuse(.invalidPayload, problem)
                return
            }
            (name, limit, perKey) = (given.service, given.limit, given.limit.isPerKey)
        } else {
            guard let text = String(validating: request.body, as: UTF8.self) else {
                refuse(
                    .invalidPayload,
                    "the body is not UTF-8: give a service's name, and a second line \"key\" to remove its per-key limit"
                )
                return
            }
            let lines = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            guard lines.count == 1 || lines[1] == BrokerService.limitRemoveKeyLine else {
                refuse(
                    .invalidPayload,
                    "the body is a service's name, and a second line \"\(BrokerService.limitRemoveKeyLine)\" to remove its per-key limit; nothing else"
                )
                return
            }
            (name, perKey) = (String(lines[0]), lines.count == 2)
        }
        if let problem = WireFormat.nameProblem(name, what: "service name") {
            refuse(.invalidPayload, problem)
            return
        }
        if name.hasPrefix(BrokerService.prefix) {
            refuse(.invalidPayload, "\(name) is the broker's own; it cannot be limited")
            return
        }
        let previous = rates.setLimit(name, perKey: perKey)
        if limit != nil, previous == nil, rates.setCount >= Self.maxLimitedServices {
            refuse(
                .overloaded, "\(Self.maxLimitedServices) limits are set, the broker's most: remove one first")
            return
        }
        guard limit != previous else {
            answer(caller, .ok, [0], into: &actions)
            return
        }
        setLimit(name, limit, perKey: perKey, now: now, into: &actions)
        logAboutPeer(.info, limit == nil ? "rate limit removed" : "rate limit set", now: now, into: &actions) {
            [
                "service": name, "perKey": "\(perKey)",
                "limit": limit.map { "\($0.rateText) burst \($0.burst)" } ?? "none",
                "keyField": (limit ?? previous)?.key?.field ?? "",
            ]
        }
        guard jobs.configuration.journal else {
            // Kept in memory only: a broker without a journal forgets it when it stops.
            answer(caller, .ok, [1], into: &actions)
            return
        }
        let form = limit.flatMap { try? CanonicalJSON.encode($0) }
        actions.append(
            .journal(
                .write(
                    [.serviceLimited(name: RateLimitBook.journalName(name, perKey: perKey), limit: form)],
                    .serviceLimited(name: name, limit: limit, previous: previous, caller: caller))))
    }

    /// Sets the limit set for `name` of one kind (or removes it: the flag's applies, if any) in
    /// memory; its waiting work is looked at again under the new limit.
    private mutating func setLimit(
        _ name: String, _ limit: RateLimit?, perKey: Bool, now: Instant, into actions: inout [BrokerAction]
    ) {
        rates.set(name, limit, perKey: perKey)
        guard perKey else {
            services.setLimit(name, rates.effective(name)?.limit, now: ticks(now), waiting: queue.hasEntries)
            if let number = services.number(of: name) { rates.unthrottle(number) }
            jobs.throttled.remove(name)
            startWaitingWork(of: name, now: now, into: &actions)
            return
        }
        jobs.book.keyRates.now = ticks(now)
        let effective = rates.effective(name, perKey: true)?.limit
        let rested = jobs.book.keyRates.set(name, effective)
        restoreKeys(rested, of: name, now: now, into: &actions)
        startWaitingWork(of: name, now: now, into: &actions)
    }

    /// A limit's change is on disk (its caller is answered), or not (it is undone, and its
    /// caller told why).
    mutating func serviceLimitWritten(
        _ name: String, limit: RateLimit?, previous: RateLimit?, caller: JobCaller,
        _ result: Result<JournalReceipt, JournalError>, now: Instant, into actions: inout [BrokerAction]
    ) {
        switch result {
        case .success:
            answer(caller, .ok, [1], into: &actions)
        case .failure(let error):
            // Undone only if nothing changed it since (a later change is its own).
            let perKey = (limit ?? previous)?.isPerKey ?? false
            if rates.setLimit(name, perKey: perKey) == limit {
                setLimit(name, previous, perKey: perKey, now: now, into: &actions)
            }
            // The log said "rate limit set" (or removed) when it took effect: it says the undo too.
            actions.append(
                .log(
                    .warning, "rate limit change undone: it could not be recorded",
                    ["service": name, "perKey": "\(perKey)", "error": "\(error)"]))
            answer(
                caller, .journalUnavailable,
                Array("the limit of \(name) could not be recorded, so it was undone: \(error)".utf8), failure: true,
                into: &actions)
        }
    }

    /// Whether calls or jobs of `name` wait to start.
    private func waits(_ name: String, number: ServiceBook.Number) -> Bool {
        queue.count(of: number) > 0 || jobs.book.queued.has(name)
    }

    /// The limited services, by name (the first `atMost`), a service's limit on the whole
    /// service before its per-key limit.
    mutating func limitListing(atMost: Int = .max) -> RateLimitListing {
        var limits: [RateLimitState] = []
        for name in rates.names {
            guard limits.count < atMost else { break }
            if let (limit, source) = rates.effective(name) {
                let number = services.number(of: name)
                limits.append(
                    RateLimitState(
                        service: name, limit: limit, source: source,
                        started: number.map { services[$0].limitStarted } ?? 0,
                        refused: number.map { services[$0].limitRefused } ?? 0,
                        // Waiting for a token while work of it waits (a wake-up stays due after
                        // the work that asked for it is cancelled).
                        throttled: number.map { rates.throttled[$0] != nil && waits(name, number: $0) } ?? false))
            }
            if let (limit, source) = rates.effective(name, perKey: true), limits.count < atMost {
                let state = jobs.book.keyRates.entry(name)
                let number = services.number(of: name)
                let waiting =
                    (state?.resting.keys).map { keys in
                        keys.count { key in
                            number.map { queue.waiting($0, key: key) > 0 } == true
                                || jobs.book.queued.count(of: name, key: key) > 0
                        }
                    } ?? 0
                limits.append(
                    RateLimitState(
                        service: name, limit: limit, source: source, started: state?.started ?? 0,
                        refused: state?.refused ?? 0, throttled: waiting > 0, keysWaiting: waiting,
                        keysTracked: state?.buckets.count ?? 0))
            }
        }
        return RateLimitListing(limits: limits)
    }
}
