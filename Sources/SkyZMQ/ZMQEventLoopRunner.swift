import CSkySystem
import CZMQ
import Foundation
import SkyWire
import Synchronization

/// The body of a ``ZMQEventLoop``'s thread. Created on that thread and never leaves it, so the
/// sockets it holds are used by exactly one thread.
///
/// Its stored properties and its entries' are `@exclusivity(unchecked)`: only this thread
/// touches them, and the runtime checked each access, a dozen or more per wake-up. The suite
/// ran with the checks on and found no overlapping access.
final class ZMQEventLoopRunner {
    /// A class, so that a lookup hands out a reference: a struct entry (its spec's strings and
    /// arrays, its pending queue) was copied out and destroyed on every send.
    private final class Entry {
        let id: ZMQEventLoop.SocketID
        let socket: ZMQSocket
        let spec: ZMQEventLoop.SocketSpec
        /// Messages libzmq refused for now (DEALER/PAIR at its high-water mark), oldest first.
        @exclusivity(unchecked) var pending: [ZMQEventLoop.Outbound.Content] = []
        @exclusivity(unchecked) var pendingHead = 0
        let monitorPair: ZMQSocket?
        /// Whether sends that would block are dropped (ROUTER, PUB) rather than kept.
        let dropsWhenFull: Bool
        /// The socket's and its monitor's signalling descriptors (-1: no monitor).
        let descriptors: (socket: Int32, monitor: Int32)
        /// Whether the socket's events must be asked for again before the thread sleeps. A
        /// send may take the command that would have signalled a message to read, so a socket
        /// sent on is stale, and so is a socket with messages waiting to be sent after anything
        /// touched it. A receive that found nothing needs no question: the next message to
        /// arrive signals the descriptor. New sockets start stale.
        @exclusivity(unchecked) var stale = true
        @exclusivity(unchecked) var monitorStale = true
        /// What the socket could do when last asked.
        @exclusivity(unchecked) var readable = false
        @exclusivity(unchecked) var writable = false
        @exclusivity(unchecked) var monitorReadable = false

        init(socket: ZMQSocket, spec: ZMQEventLoop.SocketSpec, monitorPair: ZMQSocket?) {
            id = spec.id
            self.socket = socket
            self.spec = spec
            self.monitorPair = monitorPair
            dropsWhenFull = spec.type == .router || spec.type == .pub || spec.type == .xpub
            descriptors = (socket.signalDescriptor, monitorPair?.signalDescriptor ?? -1)
        }

        var hasPending: Bool { pendingHead < pending.count }

        /// Closes the socket and its monitor's pair, the monitor stopped first (see
        /// ``ZMQSocket/stopMonitor()``): closing the pair while libzmq may still report a
        /// disconnection stranded a worker after a graceful broker restart, its context's I/O
        /// thread blocked for good on an event nobody would read.
        func close(linger: Int32) {
            if let monitorPair {
                socket.stopMonitor()
                monitorPair.close(linger: 0)
            }
            socket.close(linger: linger)
        }

        /// Asks libzmq what the socket (and its monitor) can do, where that may have changed.
        func refresh() {
            if stale {
                stale = false
                let events = socket.readiness
                readable = events.contains(.readable)
                writable = events.contains(.writable)
            }
            if monitorStale {
                monitorStale = false
                monitorReadable = monitorPair?.canReceive ?? false
            }
        }

        /// Whether the thread has something to do with the socket now, without sleeping.
        func isReady(paused: Bool) -> Bool {
            (!paused && (readable || monitorReadable)) || (writable && hasPending)
        }
    }

    /// Upper bound of messages read from one socket per wake-up, so one busy socket cannot
    /// starve the others or the mailbox. The loop polls again at once when it was reached.
    private static let readBudget = 1024

    /// With an inline handler, messages are handed to it in chunks of this many as they are
    /// read, and reading stops for this wake-up once ``readSlice`` has passed since it began:
    /// the handler's work bounds an iteration, not the count read (1,024 requests took the
    /// broker 100–200 ms in a debug build on a loaded machine, and its workers' heartbeats
    /// waited). The socket stays readable, so the next poll does not sleep.
    private static let handlerChunk = 32
    private static let readSlice: Int64 = 4_000_000
    /// A chunk is handed over early once it holds this many bytes: what was read but not yet
    /// handled is a copy the broker's byte bounds do not see (32 requests of 8 MiB were 256 MiB
    /// in flight at once).
    private static let handlerChunkBytes = 8 << 20

    /// Times the thread takes its mailbox again in one wake-up for what it posted to itself (a
    /// message starts a task, the task posts its answer): enough for such a chain to finish
    /// before the next poll, few enough that a task that keeps posting cannot starve the sockets.
    private static let jobRounds = 4

    private let loop: ZMQEventLoop
    private let context: ZMQContext
    private let ownsContext: Bool
    /// The open sockets in the order they were opened (the poll set's order). A process has a
    /// handful, so finding one is a short scan: a dictionary hashed the id on every send.
    @exclusivity(unchecked) private var entries: [Entry] = [] {
        didSet { held = entries.map { Unmanaged.passUnretained($0) } }
    }
    /// ``entries`` again, unretained, for the hot paths: each is lent to them with
    /// `_withUnsafeGuaranteedRef`, since a strong reference taken from ``entries`` was retained
    /// and released at every turn (a dozen times a wake-up in the broker). Only
    /// ``takeCommands()`` opens and closes sockets, never while one is lent.
    @exclusivity(unchecked) private var held: [Unmanaged<Entry>] = []
    @exclusivity(unchecked) private var poll = SignalPoll()
    @exclusivity(unchecked) private var pollIsStale = true
    @exclusivity(unchecked) private var batch: [ZMQEventLoop.Inbound] = []
    /// Received messages' buffers written again once the inline handler is done with them; none
    /// for a loop that hands its batches to a task (they leave the thread).
    @exclusivity(unchecked) private var framePool: FrameBufferPool?
    /// Buffers kept between wake-ups (see ``takeCommands()``).
    @exclusivity(unchecked) private var spareCommands: [ZMQEventLoop.Command] = []
    @exclusivity(unchecked) private var spareJobs: [ZMQEventLoop.Job] = []
    @exclusivity(unchecked) private var running = true
    @exclusivity(unchecked) private var closingLinger: Int32 = 0
    /// Times below are the loop's nanoseconds (``LoopTime``).
    private let time: LoopTime
    private let tick: Int64?
    @exclusivity(unchecked) private var nextTick: Int64?
    /// When the thread last returned from a poll.
    @exclusivity(unchecked) private var lastWake: Int64 = 0
    /// Messages the thread sends by itself (heartbeats), and the earliest one's time.
    @exclusivity(unchecked) private var periodic: [PeriodicSend] = []
    @exclusivity(unchecked) private var periodicDue = Int64.max

    private struct PeriodicSend {
        let socket: ZMQEventLoop.SocketID
        let frames: [[UInt8]]
        let interval: Int64
        var next: Int64
    }

    init(loop: ZMQEventLoop, context: ZMQContext, ownsContext: Bool) {
        self.loop = loop
        self.context = context
        self.ownsContext = ownsContext
        time = loop.time
        tick = loop.tick.map(LoopTime.nanoseconds)
        framePool = loop.handler == nil ? nil : FrameBufferPool()
    }

    func run(
        initialSockets: [ZMQEventLoop.SocketSpec],
        ready: CheckedContinuation<[ZMQEventLoop.SocketID: [String]], any Error>
    ) {
        var endpoints: [ZMQEventLoop.SocketID: [String]] = [:]
        do {
            for spec in initialSockets { endpoints[spec.id] = try open(spec) }
        } catch {
            closeAll()
            finish()
            ready.resume(throwing: error)
            return
        }
        loop.threadID.store(sky_current_thread_id(), ordering: .relaxed)
        ready.resume(returning: endpoints)
        lastWake = time.now()
        if let tick { nextTick = LoopTime.time(lastWake, plus: tick) }

        while running {
            takeCommands()
            guard running else {
                // What was posted before the shutdown still reaches an inline handler (a client
                // failing its calls as it closes); what it sends leaves within the linger.
                if loop.handler != nil { yieldBatch() }
                break
            }
            sendDuePeriodic(now: lastWake)
            flushPending()
            let paused = readingPaused()
            // Hand over what is collected before sleeping (send failures, monitor events).
            if !paused { yieldBatch() }
            waitAndRead(paused: paused)
            let soon = loop.tickRequested.exchange(false, ordering: .relaxed)
            let now = lastWake
            if let tick, let due = nextTick, soon || now >= due {
                // A consumer that is behind gets the next tick after it caught up.
                if !paused { batch.append(.tick) }
                if now >= due { nextTick = LoopTime.time(now, plus: tick) }
            } else if loop.takeAlarm(ifDueAt: now) {
                batch.append(.tick)
            }
            if !paused { yieldBatch() }
        }
        closeAll()
        finish()
    }

    // MARK: Sockets

    /// Where socket `id` is in ``entries`` and ``held``.
    private func index(of id: ZMQEventLoop.SocketID) -> Int? {
        for index in held.indices where held[index]._withUnsafeGuaranteedRef({ $0.id == id }) { return index }
        return nil
    }

    private func open(_ spec: ZMQEventLoop.SocketSpec) throws(ZMQEventLoop.SetupError) -> [String] {
        if index(of: spec.id) != nil {
            throw ZMQEventLoop.SetupError(
                socket: spec.id, underlying: ZMQError(code: EEXIST, operation: "open: socket id already in use"))
        }
        let socket: ZMQSocket
        do {
            socket = try ZMQSocket(context: context, type: spec.type)
        } catch {
            throw ZMQEventLoop.SetupError(socket: spec.id, underlying: error)
        }
        var monitorPair: ZMQSocket?
        do {
            // Never let a close wait on undeliverable messages unless the spec asks for it.
            try socket.set(.linger(milliseconds: 0))
            try socket.set(spec.options)
            if let events = spec.monitor {
                let endpoint = "inproc://sky-monitor-\(UUID().uuidString)"
                try socket.startMonitor(endpoint: endpoint, events: events)
                let pair = try ZMQSocket(context: context, type: .pair)
                try pair.connect(endpoint)
                monitorPair = pair
            }
            var bound: [String] = []
            for endpoint in spec.bind {
                try socket.bind(endpoint)
                bound.append(socket.lastEndpoint)
            }
            for endpoint in spec.connect { try socket.connect(endpoint) }
            entries.append(Entry(socket: socket, spec: spec, monitorPair: monitorPair))
            loop.openSockets.store(entries.count, ordering: .relaxed)
            pollIsStale = true
            return bound
        } catch {
            if let monitorPair {
                socket.stopMonitor()
                monitorPair.close(linger: 0)
            }
            socket.close(linger: 0)
            throw ZMQEventLoop.SetupError(socket: spec.id, underlying: error)
        }
    }

    private func closeSocket(_ id: ZMQEventLoop.SocketID, linger: Int32) {
        setPeriodic(nil, on: id, every: .zero)
        guard let index = entries.firstIndex(where: { $0.id == id }) else { return }
        entries.remove(at: index).close(linger: linger)
        loop.openSockets.store(entries.count, ordering: .relaxed)
        pollIsStale = true
    }

    private func closeAll() {
        for entry in entries { entry.close(linger: closingLinger) }
        entries.removeAll()
        loop.openSockets.store(0, ordering: .relaxed)
    }

    /// Ends the stream and wakes ``ZMQEventLoop/shutdown()`` callers, after terminating an owned
    /// context here on the I/O thread (it waits for lingering messages to leave).
    private func finish() {
        if ownsContext { context.terminate() }
        loop.continuation.finish()
        let (waiters, jobs) = loop.mailbox.withLock { box in
            box.stopped = true
            box.finished = true
            box.commands.removeAll()
            defer {
                box.shutdownWaiters.removeAll()
                box.jobs.removeAll()
            }
            return (box.shutdownWaiters, box.jobs)
        }
        // Tasks that prefer the loop go on elsewhere (see ``ZMQEventLoop/enqueue(_:)``).
        for job in jobs { globalConcurrentExecutor.enqueue(ExecutorJob(job.job)) }
        for waiter in waiters { waiter.resume() }
    }

    // MARK: Flow control

    /// Whether the consumer is so far behind that the thread must stop reading: from the high
    /// watermark until it is back at the low one. An inline handler is never behind.
    private func readingPaused() -> Bool {
        guard loop.handler == nil else { return false }
        let high = loop.maxPendingMessages
        let low = loop.resumeBelow
        return loop.mailbox.withLock { box in
            if box.readingPaused {
                box.readingPaused = box.pendingMessages > low
            } else {
                box.readingPaused = box.pendingMessages >= high
            }
            return box.readingPaused
        }
    }

    private func yieldBatch() {
        guard !batch.isEmpty else { return }
        if let handler = loop.handler {
            // The batch's buffer is used again on the next wake-up.
            var taken: [ZMQEventLoop.Inbound] = []
            swap(&taken, &batch)
            // Sends leave as the handler makes them; failures land in `batch`, for its next call.
            var sender = ZMQEventLoop.Sender(runner: self)
            handler(&taken, &sender)
            framePool?.reclaim()
            if batch.isEmpty {
                taken.removeAllKeepingBuffer()
                batch = taken
            }
            return
        }
        let messages = batch.messageCount
        if messages > 0 { loop.mailbox.withLock { $0.pendingMessages += messages } }
        loop.continuation.yield(batch)
        batch = []
        batch.reserveCapacity(64)
    }

    // MARK: Mailbox

    /// Takes the mailbox, and takes it again while the thread posted to it itself (up to
    /// ``jobRounds`` times; the flag stays set past that, so the next poll does not wait).
    private func takeCommands() {
        var rounds = 0
        repeat {
            takeCommandsOnce()
            rounds += 1
        } while running && rounds < Self.jobRounds && loop.queuedOnThread.exchange(false, ordering: .relaxed)
    }

    private func takeCommandsOnce() {
        guard loop.mailPending.load(ordering: .acquiring) else { return }
        // The buffers trade places, so neither side allocates once both have grown.
        var commands = spareCommands
        spareCommands = []
        var jobs = spareJobs
        spareJobs = []
        loop.mailbox.withLock { box in
            box.wakePending = false
            loop.mailPending.store(false, ordering: .relaxed)
            swap(&box.commands, &commands)
            if !box.jobs.isEmpty { swap(&box.jobs, &jobs) }
        }
        defer {
            commands.removeAllKeepingBuffer()
            spareCommands = commands
            // After the commands: a job sees the sockets they opened.
            if !jobs.isEmpty { loop.jobsRun.add(jobs.count, ordering: .relaxed) }
            for job in jobs { job.job.runSynchronously(on: job.executor) }
            jobs.removeAllKeepingBuffer()
            spareJobs = jobs
        }
        // Each command moved out, not copied: a `for` loop copied each through the enum's
        // generic witnesses, and the array's `removeAll` destroyed it again. The placeholder
        // left behind is never carried out.
        commands.takeEach(leaving: .shutdown(linger: 0)) { command in
            switch consume command {
            case .send(let outbound): send(outbound)
            case .open(let spec, let done):
                let outcome = Result { () throws(ZMQEventLoop.SetupError) in try open(spec) }
                if let done {
                    done.resume(with: outcome.mapError { $0 })
                } else {
                    batch.append(.opened(spec.id, outcome))
                }
            case .input(let value): batch.append(.input(value))
            case .close(let id, let linger): closeSocket(id, linger: linger)
            case .periodic(let id, let frames, let interval): setPeriodic(frames, on: id, every: interval)
            case .shutdown(let linger):
                loop.mailbox.withLock { $0.stopped = true }
                closingLinger = linger
                running = false
            }
        }
    }

    /// Sends one message now, or keeps it for later (see ``ZMQEventLoop/Sender``).
    func send(_ outbound: ZMQEventLoop.Outbound) {
        guard let index = index(of: outbound.socket) else {
            batch.append(
                .sendFailed(
                    outbound.socket, outbound.content.arrays,
                    ZMQError(code: ENOTSOCK, operation: "send on \(outbound.socket): socket is not open")))
            return
        }
        held[index]._withUnsafeGuaranteedRef { entry in
            deliver(on: entry, { () throws(ZMQError) in try entry.socket.send(outbound.content, dontWait: true) }) {
                outbound.content
            }
        }
    }

    /// ``send(_:)`` for a message lent in its parts, copied into a ``ZMQEventLoop/Outbound``
    /// only when it must wait or failed.
    func send(_ parts: FrameParts, on id: ZMQEventLoop.SocketID) {
        guard let index = index(of: id) else {
            send(ZMQEventLoop.Outbound(socket: id, message: Frames(parts)))
            return
        }
        held[index]._withUnsafeGuaranteedRef { entry in
            deliver(on: entry, { () throws(ZMQError) in try entry.socket.send(parts, dontWait: true) }) {
                .frames(Frames(parts))
            }
        }
    }

    /// Sends by `attempt` now, or keeps the message (`kept` makes it, only then) behind those
    /// waiting for room; a ROUTER or PUB that cannot take it, or a failed send, reports it in
    /// the next batch.
    private func deliver(
        on entry: Entry, _ attempt: () throws(ZMQError) -> Bool, kept: () -> ZMQEventLoop.Outbound.Content
    ) {
        if entry.hasPending {
            entry.pending.append(kept())
            loop.blockedSends.add(1, ordering: .relaxed)
            return
        }
        entry.stale = true
        do {
            if try attempt() { return }
            if entry.dropsWhenFull {
                batch.append(.sendFailed(entry.id, kept().arrays, ZMQError(code: EAGAIN, operation: "zmq_send")))
            } else {
                entry.pending.append(kept())
                loop.blockedSends.add(1, ordering: .relaxed)
            }
        } catch {
            batch.append(.sendFailed(entry.id, kept().arrays, error))
        }
    }

    /// Replaces the message sent periodically on `socket` (`nil`: none). The first one is due at once.
    private func setPeriodic(_ frames: [[UInt8]]?, on socket: ZMQEventLoop.SocketID, every interval: Duration) {
        periodic.removeAll { $0.socket == socket }
        if let frames, index(of: socket) != nil {
            periodic.append(.init(socket: socket, frames: frames, interval: LoopTime.nanoseconds(interval), next: 0))
        }
        periodicDue = periodic.lazy.map(\.next).min() ?? .max
    }

    /// Sends the periodic messages due at `now` (the thread's last wake-up: what it does
    /// before it polls again takes microseconds, and the poll's timeout is in milliseconds).
    private func sendDuePeriodic(now: Int64) {
        guard now >= periodicDue else { return }
        periodicDue = .max
        for index in periodic.indices {
            if periodic[index].next <= now {
                send(ZMQEventLoop.Outbound(socket: periodic[index].socket, frames: periodic[index].frames))
                periodic[index].next = LoopTime.time(now, plus: periodic[index].interval)
            }
            periodicDue = min(periodicDue, periodic[index].next)
        }
    }

    private func flushPending() {
        for index in held.indices {
            held[index]._withUnsafeGuaranteedRef { entry in
                guard entry.hasPending else { return }
                let id = entry.id
                entry.stale = true
                while entry.hasPending {
                    let frames = entry.pending[entry.pendingHead]
                    do throws(ZMQError) {
                        guard try entry.socket.send(frames, dontWait: true) else { break }
                    } catch {
                        batch.append(.sendFailed(id, frames.arrays, error))
                    }
                    entry.pendingHead += 1
                }
                if !entry.hasPending {
                    entry.pending.removeAll(keepingCapacity: true)
                    entry.pendingHead = 0
                }
            }
        }
    }

    // MARK: Polling

    /// Sleeps until a socket or the wake-up descriptor needs the thread (not at all when one
    /// does already), then reads everything that is waiting. A socket that had more than the
    /// read budget stays readable, so the next call does not sleep. While `paused`, sockets
    /// are watched only for sending and nothing is read.
    ///
    /// Sockets are asked for their events only where those may have changed (see
    /// ``Entry/stale``): libzmq signals a socket's descriptor when its state changes, but a
    /// send or receive on the socket may take that signal, so a used socket is asked again.
    private func waitAndRead(paused: Bool) {
        if pollIsStale {
            poll.reset(wake: loop.wake.readFD, sockets: entries.map(\.descriptors))
            pollIsStale = false
        }
        var ready = false
        for index in held.indices {
            held[index]._withUnsafeGuaranteedRef { entry in
                entry.refresh()
                if entry.isReady(paused: paused) { ready = true }
            }
        }
        var timeout = -1
        if ready || loop.tickRequested.load(ordering: .relaxed) || loop.queuedOnThread.load(ordering: .relaxed) {
            timeout = 0
        }
        let now = time.now()
        let due = min(nextTick ?? .max, periodicDue, loop.alarmNanoseconds.load(ordering: .relaxed))
        if due != .max, timeout != 0 {
            // Round up, so the thread does not wake a fraction of a millisecond early (without
            // a sum that could overflow: an absurd deadline is just below `Int64.max`).
            let remaining = max(0, due - now)
            let milliseconds = remaining / 1_000_000 + (remaining % 1_000_000 == 0 ? 0 : 1)
            timeout = Int(min(milliseconds, Int64(Int32.max)))
        }
        loop.longestIterationNanoseconds.max(now - lastWake, ordering: .relaxed)
        // Polled even when a socket is ready (without waiting), so that the others' signals
        // and the wake-up descriptor are seen while one socket stays busy.
        loop.polls.add(1, ordering: .relaxed)
        let woke = poll.wait(timeoutMilliseconds: timeout)
        // The iteration starts here: reading, and the inline handler's chunks, are part of it.
        lastWake = time.now()
        guard woke else {
            running = false
            return
        }
        if poll.wakeFired { drainWakePipe() }
        for index in held.indices {
            // A socket that fired is read at once (a receive that finds nothing costs what the
            // question would, and resets the descriptor too). The events are asked for when a
            // send waits, or when nothing will be read: a descriptor left signalled would wake
            // every poll, and the thread would spin while reading is paused.
            let fired = poll.socketFired(index)
            let monitorFired = poll.monitorFired(index)
            held[index]._withUnsafeGuaranteedRef { entry in
                if fired {
                    entry.readable = true
                    if entry.hasPending || paused { entry.stale = true }
                }
                if monitorFired {
                    entry.monitorReadable = true
                    if paused { entry.monitorStale = true }
                }
                entry.refresh()
            }
        }
        guard !paused else { return }
        for index in held.indices {
            held[index]._withUnsafeGuaranteedRef { entry in
                if entry.readable { read(from: entry) }
                if entry.monitorReadable { readMonitor(of: entry) }
            }
        }
    }

    private func drainWakePipe() {
        loop.wake.drain()
    }

    /// Reads up to the budget from one socket. Past the budget the socket stays readable.
    private func read(from entry: Entry) {
        let id = entry.id
        // A receive may take the command that would have signalled room to send.
        if entry.hasPending { entry.stale = true }
        let inline = loop.handler != nil
        var chunk = 0
        var chunkBytes = 0
        for _ in 0..<Self.readBudget {
            do {
                guard
                    let message = try entry.socket.receive(
                        dontWait: true, readUserID: entry.spec.readUserID, readPeerAddress: entry.spec.readPeerAddress,
                        peerAddressFilter: entry.spec.peerAddressFilter, pool: &framePool)
                else {
                    entry.readable = false
                    return
                }
                if inline {
                    chunk += 1
                    chunkBytes += message.byteCount
                }
                batch.append(.message(id, message))
                if inline && (chunk == Self.handlerChunk || chunkBytes >= Self.handlerChunkBytes) {
                    chunk = 0
                    chunkBytes = 0
                    yieldBatch()
                    if time.now() - lastWake >= Self.readSlice { return }
                }
            } catch {
                // Not "nothing to read": libzmq is asked again before the thread sleeps.
                entry.readable = false
                entry.stale = true
                return
            }
        }
    }

    private func readMonitor(of entry: Entry) {
        // Monitor events are few: the pair is simply asked again before the thread sleeps.
        entry.monitorReadable = false
        entry.monitorStale = true
        guard let pair = entry.monitorPair else { return }
        while let message = try? pair.receive(dontWait: true) {
            if let event = ZMQMonitorEvent(message: message) { batch.append(.monitor(entry.id, event)) }
        }
    }
}
