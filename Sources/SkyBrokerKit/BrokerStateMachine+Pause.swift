import SkyJSON
import SkyJournal
import SkyProtocol

/// Paused services: nothing of a paused service is sent to a worker (its waiting calls wait up
/// to their deadline, its jobs wait unprepared), what runs finishes, and the pause is kept in
/// the journal across restarts. `mmi.services.pause`, `.resume` and `.list`.
///
/// A pause takes effect at once, before it is on disk, so that nothing starts meanwhile; its
/// caller is answered once it is written, and a pause that cannot be written is undone (the
/// caller told why), so that memory and disk agree.
extension BrokerStateMachine {
    /// The services the journal held paused, before its unfinished jobs are taken up.
    package mutating func pausedAtStart(_ names: [String]) {
        for name in names { setPaused(name, true) }
    }

    /// Whether `name` is paused.
    func isPaused(_ name: String) -> Bool { services.paused.contains(name) }

    /// Pauses or resumes `name` in memory: its dispatch flag, and the job scheduler's.
    private mutating func setPaused(_ name: String, _ on: Bool) {
        services.setPaused(name, on)
        if on { jobs.paused.insert(name) } else { jobs.paused.remove(name) }
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
        let name = String(decoding: request.body, as: UTF8.self)
        if let problem = WireFormat.nameProblem(name, what: "service name") {
            answer(caller, .invalidPayload, Array("\(request.service): \(problem)".utf8), failure: true, into: &actions)
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
        setPaused(name, pause)
        actions.append(
            .log(.info, pause ? "service paused" : "service resumed", ["service": name, "changed": "\(changed)"]))
        if !pause, changed { startWaitingWork(of: name, now: now, into: &actions) }
        guard jobs.configuration.journal else {
            // Kept in memory only: a broker without a journal forgets it when it stops.
            answer(caller, .ok, [], into: &actions)
            return
        }
        actions.append(
            .journal(
                .write(
                    [.servicePaused(name: name, paused: pause)],
                    .servicePaused(name: name, paused: pause, caller: caller))))
    }

    /// A pause or resume is on disk (its caller is answered), or not (it is undone, and its
    /// caller told why).
    mutating func servicePauseWritten(
        _ name: String, paused: Bool, caller: JobCaller, _ result: Result<JournalReceipt, JournalError>, now: Instant,
        into actions: inout [BrokerAction]
    ) {
        switch result {
        case .success:
            answer(caller, .ok, [], into: &actions)
        case .failure(let error):
            // Undone only if nothing changed it since (a later pause or resume is its own).
            if isPaused(name) == paused {
                setPaused(name, !paused)
                if paused { startWaitingWork(of: name, now: now, into: &actions) }
            }
            answer(
                caller, .journalUnavailable,
                Array(
                    "the \(paused ? "pause" : "resume") of \(name) could not be recorded, so it was undone: \(error)"
                        .utf8),
                failure: true, into: &actions)
        }
    }

    /// A resumed service's waiting calls and jobs go to its workers' free credits.
    private mutating func startWaitingWork(of name: String, now: Instant, into actions: inout [BrokerAction]) {
        withJobs(now: now, into: &actions) { $0.prepare(name, into: &$1) }
        for peer in workers(serving: name) { fill(peer, now: now, into: &actions) }
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
                    queued: number.map { services[$0].queued.count } ?? 0,
                    jobsQueued: (jobs.book.queued.counts[name] ?? 0) + (jobs.book.ready.counts[name] ?? 0),
                    paused: isPaused(name))
            })
    }

    private mutating func answer(
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
