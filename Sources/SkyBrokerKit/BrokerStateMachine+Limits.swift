import SkyJSON
import SkyJournal
import SkyProtocol

/// Rate limits on services' starts: at most R starts a second, in bursts of at most B, for a
/// service's calls and jobs together (a token bucket each, ``TokenBucket``). Set by the broker's
/// flag (``BrokerRouting/rateLimits``) or through `mmi.limits.set`, `.remove` and `.list`
/// (kept in the journal, and taking the flag's place for their service until removed).
///
/// Work of a limited service with no token waits, a call up to its deadline, a job as long as it
/// takes: the broker wakes when the next token is due (at most every millisecond) and starts
/// it then. A call that would wait past its deadline is answered at once: `overloaded`, of type
/// `rateLimited`, with the wait it would have needed.
extension BrokerStateMachine {
    /// Services limited at most: each is a row in the journal and a line of the listing.
    static let maxLimitedServices = 10_000

    /// The limits the broker's flag gives, from its configuration.
    mutating func applyFlaggedLimits() {
        rates.flagged = configuration.rateLimits
        for (name, limit) in configuration.rateLimits {
            services.setLimit(name, limit, now: 0, waiting: queue.hasEntries)
        }
    }

    /// The limits the journal held, before its unfinished jobs are taken up; one it cannot read
    /// is logged and left out (the flag's, if any, applies).
    package mutating func limitsAtStart(
        _ written: [(name: String, limit: [UInt8])], now: Instant, into actions: inout [BrokerAction]
    ) {
        var unreadable: [String] = []
        for (name, bytes) in written {
            guard let limit = try? CanonicalJSON.decode(RateLimit.self, from: bytes), limit.problem == nil else {
                unreadable.append(name)
                continue
            }
            rates.set(name, limit)
            services.setLimit(name, limit, now: ticks(now), waiting: queue.hasEntries)
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
        guard services[service].bucket?.hasToken(now: now) == false else { return true }
        throttle(service, now: now)
        return false
    }

    /// Takes a token of `service` for a start, if it has a limit; `false` (the start waits) if
    /// it has no token.
    mutating func takeStart(_ service: ServiceBook.Number, now: Int64) -> Bool {
        guard let took = services[service].bucket?.take(now: now) else { return true }
        if took {
            services[service].limitStarted += 1
        } else {
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
    /// the calls waiting ahead of it would take the tokens until after its deadline.
    /// - Returns: the answer's body, or `nil` if it may wait.
    mutating func rateRefusal(_ task: QueuedRequest, _ service: ServiceBook.Number, now: Int64) -> RemoteErrorBody? {
        let ahead = queue.count(of: service)
        guard let limit = services[service].bucket?.limit,
            let due = services[service].bucket?.due(position: ahead + 1, now: now)
        else { return nil }
        let expiry = queueExpiry(task)
        guard due > expiry else { return nil }
        services[service].limitRefused += 1
        let wait = due - now
        let message =
            "the service \(task.request.service) is limited to \(limit.rateText) (burst \(limit.burst)) and \(ahead) calls wait ahead of this one: it would start in \(Self.seconds(wait)), after its deadline (in \(Self.seconds(max(0, expiry - now)))). Give it a longer deadline, send fewer, or raise the limit (skyctl limits set)"
        return RemoteErrorBody(
            type: RemoteErrorBody.rateLimitedType, message: message, retryAfterMs: (wait + 999_999) / 1_000_000)
    }

    private static func seconds(_ nanoseconds: Int64) -> String {
        let milliseconds = nanoseconds / 1_000_000
        return milliseconds < 1000 ? "\(milliseconds) ms" : "\(Double(milliseconds) / 1000) s"
    }

    /// When the broker should next wake up for a token, if work waits for one.
    package var nextRateWake: Instant? {
        guard let due = rates.nextWake, let epoch else { return nil }
        return epoch + .nanoseconds(due)
    }

    /// Time passed: services whose next token is due start their waiting work.
    package mutating func rateWake(now: Instant, into actions: inout [BrokerAction]) {
        for service in rates.takeDue(now: ticks(now)) where services.isKnown(service) {
            let name = services[service].name
            jobs.throttled.remove(name)
            startWaitingWork(of: name, now: now, into: &actions)
        }
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
        if request.service == BrokerService.limitSet {
            guard let given = try? CanonicalJSON.decode(ServiceRateLimit.self, from: request.body) else {
                refuse(.invalidPayload, #"the body is not a limit: give {"service":"…","perSecond":100,"burst":20}"#)
                return
            }
            if let problem = given.limit.problem {
                refuse(.invalidPayload, problem)
                return
            }
            (name, limit) = (given.service, given.limit)
        } else {
            guard let text = String(validating: request.body, as: UTF8.self) else {
                refuse(.invalidPayload, "the service name is not UTF-8")
                return
            }
            name = text
        }
        if let problem = WireFormat.nameProblem(name, what: "service name") {
            refuse(.invalidPayload, problem)
            return
        }
        if name.hasPrefix(BrokerService.prefix) {
            refuse(.invalidPayload, "\(name) is the broker's own; it cannot be limited")
            return
        }
        let previous = rates.set[name]
        if limit != nil, previous == nil, rates.set.count >= Self.maxLimitedServices {
            refuse(
                .overloaded, "\(Self.maxLimitedServices) services have limits set, the broker's most: remove one first")
            return
        }
        guard limit != previous else {
            answer(caller, .ok, [0], into: &actions)
            return
        }
        setLimit(name, limit, now: now, into: &actions)
        logAboutPeer(.info, limit == nil ? "rate limit removed" : "rate limit set", now: now, into: &actions) {
            ["service": name, "limit": limit.map { "\($0.rateText) burst \($0.burst)" } ?? "none"]
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
                    [.serviceLimited(name: name, limit: form)],
                    .serviceLimited(name: name, limit: limit, previous: previous, caller: caller))))
    }

    /// Sets the limit set for `name` (or removes it: the flag's applies, if any) in memory;
    /// its waiting work is looked at again under the new limit.
    private mutating func setLimit(
        _ name: String, _ limit: RateLimit?, now: Instant, into actions: inout [BrokerAction]
    ) {
        rates.set(name, limit)
        services.setLimit(name, rates.effective(name)?.limit, now: ticks(now), waiting: queue.hasEntries)
        if let number = services.number(of: name) { rates.unthrottle(number) }
        jobs.throttled.remove(name)
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
            if rates.set[name] == limit { setLimit(name, previous, now: now, into: &actions) }
            answer(
                caller, .journalUnavailable,
                Array("the limit of \(name) could not be recorded, so it was undone: \(error)".utf8), failure: true,
                into: &actions)
        }
    }

    /// The limited services, by name (the first `atMost`).
    mutating func limitListing(atMost: Int = .max) -> RateLimitListing {
        RateLimitListing(
            limits: rates.names.prefix(atMost).compactMap { name in
                guard let (limit, source) = rates.effective(name) else { return nil }
                let number = services.number(of: name)
                return RateLimitState(
                    service: name, limit: limit, source: source,
                    started: number.map { services[$0].limitStarted } ?? 0,
                    refused: number.map { services[$0].limitRefused } ?? 0,
                    throttled: number.map { rates.throttled[$0] != nil } ?? false)
            })
    }
}
