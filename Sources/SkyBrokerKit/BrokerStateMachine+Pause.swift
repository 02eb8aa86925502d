import SkyJSON
import SkyJournal
import SkyProtocol
import SkyWire
import SkyZMQ

/// Paused services: nothing of a paused service is sent to a worker (its waiting calls wait up
/// to their deadline, its jobs wait unprepared), what runs finishes, and the pause is kept in
/// the journal across restarts. `mmi.services.pause`, `.resume` and `.list`.
///
/// A pause takes effect at once, before it is on disk, so that nothing starts meanwhile; its
/// caller is answered once it is written, and a pause that cannot be written is undone (the
/// caller told why), so that memory and disk agree. A resume takes effect only once it is on
/// disk: one that cannot be written started nothing (taken at once and undone, it ran jobs of
/// a service that stayed paused).
extension BrokerStateMachine {
    /// Services paused at most: each is a row in the journal and a line of the listing.
    static let maxPausedServices = 10_000

    /// The services the journal held paused, before its unfinished jobs are taken up.
    package mutating func pausedAtStart(_ names: [String]) {
        var ignored: [BrokerAction] = []
        for name in names { setPaused(name, true, now: lastNow ?? .now, into: &ignored) }
    }

    /// Whether `name` is paused.
    func isPaused(_ name: String) -> Bool { services.paused.contains(name) }

    /// Pauses or resumes `name` in memory: its dispatch flag, and the job scheduler's (which
    /// takes back the starts it prepared).
    private mutating func setPaused(_ name: String, _ on: Bool, now: Instant, into actions: inout [BrokerAction]) {
        services.setPaused(name, on)
        if on {
            withJobs(now: now, into: &actions) { $0.pause(name, into: &$1) }
        } else {
            jobs.paused.remove(name)
        }
    }

    /// Answers `mmi.services.pause`, `.resume` and `.list`.
    mutating func answerServiceControl(
        _ request: TaskRequest, for peer: PeerID, now: Instant, into actions: inout [BrokerAction]
    ) {
        let caller = JobCaller(peer: peer, requestID: request.requestID, attempt: request.header.attempt)
        if request.service == BrokerService.serviceList {
            answer(caller, .ok, (try? CanonicalJSON.encode(serviceListing())) ?? Array("{}".utf8), into: &actions)
            return
        }
        guard let name = String(validating: request.body, as: UTF8.self) else {
            answer(
                caller, .invalidPayload, Array("\(request.service): the service name is not UTF-8".utf8), failure: true,
                into: &actions)
            return
        }
        if let problem = WireFormat.nameProblem(name, what: "service name") {
            answer(caller, .invalidPayload, Array("\(request.service): \(problem)".utf8), failure: true, into: &actions)
            return
        }
        if request.service == BrokerService.serviceKeys {
            answer(caller, .ok, (try? CanonicalJSON.encode(keyListing(of: name))) ?? Array("{}".utf8), into: &actions)
            return
        }
        if name.hasPrefix(BrokerService.prefix) {
            answer(
                caller, .invalidPayload,
                Array("\(request.service): \(name) is the broker's own; it cannot be paused".utf8),
                failure: true, into: &actions)
            return
        }
        let pause = request.service == BrokerService.servicePause
        let changed = isPaused(name) != pause
        if pause, changed, services.paused.count >= Self.maxPausedServices {
            answer(
                caller, .overloaded,
                Array(
                    "\(Self.maxPausedServices) services are paused, the broker's limit: resume one first".utf8),
                failure: true, into: &actions)
            return
        }
        if pause {
            // A resume still being written no longer takes effect: this pause came after it.
            services.resumesBeingWritten.remove(name)
        }
        guard jobs.configuration.journal else {
            // Kept in memory only: a broker without a journal forgets it when it stops.
            apply(name, paused: pause, changed: changed, now: now, into: &actions)
            answer(caller, .ok, [changed ? 1 : 0], into: &actions)
            return
        }
        if pause {
            apply(name, paused: true, changed: changed, now: now, into: &actions)
        } else if changed {
            services.resumesBeingWritten.insert(name)
        }
        actions.append(
            .journal(
                .write(
                    [.servicePaused(name: name, paused: pause)],
                    .servicePaused(name: name, paused: pause, changed: changed, caller: caller))))
    }

    /// A pause or resume is on disk (its caller is answered), or not (it is undone, and its
    /// caller told why).
    mutating func servicePauseWritten(
        _ name: String, paused: Bool, changed: Bool, caller: JobCaller,
        _ result: Result<JournalReceipt, JournalError>, now: Instant, into actions: inout [BrokerAction]
    ) {
        switch result {
        case .success:
            // A resume takes effect now, unless a pause came since.
            if !paused, changed, services.resumesBeingWritten.remove(name) != nil {
                apply(name, paused: false, changed: isPaused(name), now: now, into: &actions)
            }
            answer(caller, .ok, [changed ? 1 : 0], into: &actions)
        case .failure(let error):
            if paused {
                // Undone only if it changed something, and nothing changed it since (a later
                // pause or resume is its own).
                if changed, isPaused(name) {
                    apply(name, paused: false, changed: true, logged: false, now: now, into: &actions)
                }
            } else if changed {
                services.resumesBeingWritten.remove(name)
            }
            let what =
                paused
                ? "the pause of \(name) could not be recorded, so it was undone"
                : "the resume of \(name) could not be recorded, so the service stays paused and nothing of it started"
            // The log said "service paused" when the pause took effect: it says the undo too.
            if paused || changed {
                actions.append(.log(.warning, "\(what)", ["service": name, "error": "\(error)"]))
            }
            answer(caller, .journalUnavailable, Array("\(what): \(error)".utf8), failure: true, into: &actions)
        }
    }

    /// Pauses or resumes `name` in memory, says so in the log (unless `logged` is false: an
    /// undo, which says so itself), and starts its waiting work once it is resumed.
    private mutating func apply(
        _ name: String, paused: Bool, changed: Bool, logged: Bool = true, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        setPaused(name, paused, now: now, into: &actions)
        guard changed else { return }
        if logged {
            logAboutPeer(.info, paused ? "service paused" : "service resumed", now: now, into: &actions) {
                ["service": name]
            }
        }
        if !paused { startWaitingWork(of: name, now: now, into: &actions) }
    }

    /// A resumed service's waiting calls and jobs go to its workers' free credits.
    mutating func startWaitingWork(of name: String, now: Instant, into actions: inout [BrokerAction]) {
        withJobs(now: now, into: &actions) { $0.prepare(name, into: &$1) }
        for peer in workers(serving: name) { fill(peer, now: now, into: &actions) }
    }

    /// The keys of `name` with calls or jobs waiting or holding places, the most waiting first.
    func keyListing(of name: String) -> KeyListing {
        var keys: [String: KeyState] = [:]
        if let number = services.number(of: name) {
            for (key, counts) in queue.keys(of: number) {
                keys[key, default: KeyState(key: key)].callsWaiting = counts.waiting
                keys[key, default: KeyState(key: key)].callsRunning = counts.placed
            }
        }
        for (key, counts) in jobs.book.queued.keys(of: name) {
            keys[key, default: KeyState(key: key)].jobsWaiting = counts.waiting
            keys[key, default: KeyState(key: key)].jobsRunning = counts.placed
        }
        let sorted = keys.values.sorted {
            let (left, right) = ($0.callsWaiting + $0.jobsWaiting, $1.callsWaiting + $1.jobsWaiting)
            if left != right { return left > right }
            let (leftRunning, rightRunning) = ($0.callsRunning + $0.jobsRunning, $1.callsRunning + $1.jobsRunning)
            return leftRunning != rightRunning ? leftRunning > rightRunning : $0.key < $1.key
        }
        return KeyListing(
            service: name, keys: Array(sorted.prefix(KeyListing.maxKeys)),
            more: max(0, sorted.count - KeyListing.maxKeys))
    }

    /// Every service known now (served, with calls waiting) and every paused one, by name.
    func serviceListing() -> ServiceListing {
        var names = services.paused
        for number in services.known { names.insert(services[number].name) }
        for service in jobs.book.queued.counts.keys { names.insert(service) }
        return ServiceListing(
            services: names.sorted().map { name in
                let number = services.number(of: name)
                return ServiceState(
                    name: name, workers: number.map { services[$0].workers.count } ?? 0,
                    queued: number.map { queue.count(of: $0) } ?? 0,
                    jobsQueued: (jobs.book.queued.counts[name] ?? 0) + (jobs.book.ready.counts[name] ?? 0),
                    paused: isPaused(name))
            })
    }

    mutating func answer(
        _ caller: JobCaller, _ status: ReplyStatus, _ body: [UInt8], failure: Bool = false,
        into actions: inout [BrokerAction]
    ) {
        let reply =
            failure
            ? TaskReply.failure(
                caller.requestID, status, message: String(decoding: body, as: UTF8.self), attempt: caller.attempt)
            : TaskReply(requestID: caller.requestID, attempt: caller.attempt, status: status, body: body)
        replyTo(caller.peer, reply, into: &actions)
    }
}
