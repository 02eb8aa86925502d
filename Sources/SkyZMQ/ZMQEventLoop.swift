import CSkySystem
import CZMQ
import Foundation
import SkyWire
import Synchronization

/// One I/O thread that owns a set of ZeroMQ sockets and is the only thread that touches them.
///
/// Async code never calls libzmq. It talks to the loop through a locked mailbox plus a wake-up
/// `eventfd` (``send(_:on:)`` never blocks), and hears back through ``inbound``, an `AsyncStream` of
/// batches: after every wake-up the thread reads *every* waiting message of every ready socket
/// and yields them together, so one hand-off to the async world carries many messages.
///
/// Sends use `ZMQ_DONTWAIT`. A DEALER, PAIR or SUB whose queue is full keeps the message in a
/// pending queue and waits for `POLLOUT`; a ROUTER or PUB never blocks the loop: what it cannot
/// deliver is reported as ``Inbound/sendFailed(_:_:_:)`` and dropped.
///
/// Call ``shutdown()`` when done: it closes the sockets on their own thread and ends the stream.
public final class ZMQEventLoop: Sendable {
    /// Batches of everything the I/O thread received, in arrival order. Read it from one task.
    public var inbound: InboundBatches { InboundBatches(stream: stream, loop: self) }

    let stream: AsyncStream<[Inbound]>
    let continuation: AsyncStream<[Inbound]>.Continuation
    /// Messages the consumer may fall behind by before the thread stops reading (the high
    /// watermark).
    let maxPendingMessages: Int
    /// Once stopped, the thread reads again when the consumer is this close (the low
    /// watermark, half the high one): it does not flap between reading and not on every batch.
    var resumeBelow: Int { maxPendingMessages / 2 }
    let mailbox = Locked(Mailbox())
    let wake: WakeSignal
    let tick: Duration?
    /// Takes every batch on the I/O thread instead of ``inbound`` (see ``start(name:context:sockets:tick:maxPendingMessages:scheduling:handler:)``).
    let handler: InlineHandler?
    private let endpointsByID = Locked([SocketID: [String]]())
    /// The longest stretch, in nanoseconds, the thread spent between two polls since it was last
    /// taken: how long a message or timer could have waited for it.
    let longestIterationNanoseconds = Atomic<Int64>(0)
    /// Set by ``tickSoon()``: the thread polls without waiting and ticks at once.
    let tickRequested = Atomic<Bool>(false)
    /// When ``setAlarm(_:)`` asked for a tick, in ``time``'s nanoseconds; `Int64.max`: none.
    let alarmNanoseconds = Atomic<Int64>(.max)
    /// The thread's clock: its timers, the alarm and its iterations are integers on it.
    let time = LoopTime()
    /// Messages that found their socket full and waited in the thread's send queue (counted
    /// on that slow path only; for tests and diagnostics).
    let blockedSends = Atomic<Int>(0)
    /// The loop's thread (``sky_current_thread_id()``), 0 until it runs: how ``enqueue(_:)``
    /// tells a job queued by the thread itself, which needs no wake-up.
    let threadID = Atomic<UInt>(0)
    /// ``Mailbox/wakePending`` as it stands, written with it under the mailbox's lock: read
    /// without the lock, it spares the thread the lock on every wake-up that finds no mail
    /// (false there means nothing was posted since the thread last took the mailbox).
    let mailPending = Atomic<Bool>(false)
    /// Set when the thread posted to its own mailbox (a job, a command): it takes the mailbox
    /// again before it polls, and does not sleep in that poll.
    let queuedOnThread = Atomic<Bool>(false)
    /// Sockets the thread has open, from their opening to their `zmq_close` (for tests and
    /// diagnostics: a closed socket makes no more connections).
    public let openSockets = Atomic<Int>(0)
    /// The thread's kernel id, 0 until it runs (for tests and diagnostics).
    public let kernelThreadID = Atomic<Int32>(0)
    /// The policy the thread runs under: `nil` while it keeps the one it was started with
    /// (the kernel refused the one asked for).
    public let appliedScheduling = Locked<Scheduling?>(nil)
    /// Times another thread signalled the thread awake (for tests and diagnostics).
    let wakeSignals = Atomic<Int>(0)
    /// Jobs of tasks that prefer the loop the thread ran so far (for tests and diagnostics).
    let jobsRun = Atomic<Int>(0)
    /// Times the thread polled (for tests and diagnostics: a thread that spins polls without end).
    let polls = Atomic<Int>(0)
    /// Inputs posted so far (for tests and diagnostics).
    package let inputsPosted = Atomic<Int>(0)

    /// A consumer that runs on the I/O thread: it gets each batch as it is read, and what it
    /// gives the ``Sender`` leaves at once. It must not block or await anything.
    /// The handler may take the batch's elements out (``Swift/Array/takeEach(leaving:_:)``): the
    /// loop empties it afterwards, keeping its buffer for the next wake-up.
    public typealias InlineHandler = @Sendable (_ batch: inout [Inbound], _ send: inout Sender) -> Void

    private init(tick: Duration?, maxPendingMessages: Int, handler: InlineHandler?) throws(ZMQError) {
        self.handler = handler
        self.maxPendingMessages = max(1, maxPendingMessages)
        wake = try WakeSignal()
        self.tick = tick
        (stream, continuation) = AsyncStream.makeStream(of: [Inbound].self, bufferingPolicy: .unbounded)
    }

    /// Starts the I/O thread, creates the sockets, binds and connects them.
    ///
    /// - Parameters:
    ///   - name: the thread's name in the kernel (`top -H`, perf and /proc show it), cut to the
    ///     15 bytes Linux keeps.
    ///   - context: a context to share (needed for `inproc://` between loops); by default the
    ///     loop makes its own and terminates it on its thread at shutdown, after lingering
    ///     messages have left, so no Swift task ever waits in `zmq_ctx_term`.
    ///   - tick: if given, the loop also yields ``Inbound/tick`` about this often.
    ///   - maxPendingMessages: how many received messages the consumer of ``inbound`` may fall
    ///     behind by. At that point the thread stops reading its sockets (it still sends), so
    ///     libzmq's queues fill up to their high-water marks and TCP pushes back on the senders,
    ///     instead of memory growing without bound in front of a slow consumer. Counted in
    ///     messages, not batches: a consumer starved for a while (CPU-bound work on every thread)
    ///     must still find every heartbeat that came meanwhile, in order, when it runs again.
    ///   - handler: if given, every batch goes to it on the I/O thread instead of to ``inbound``
    ///     (which then stays empty), and what it asks to send is sent before the thread sleeps
    ///     again. For consumers that are pure computation (the broker's state machine): a
    ///     message then crosses no other thread inside the process, and each crossing is a
    ///     thread wake-up, which is most of the latency and CPU of a message.
    ///   - scheduling: the kernel's policy for the thread (``Scheduling``); by default
    ///     `SCHED_BATCH`, unless the environment says otherwise.
    /// - Throws: ``SetupError`` for the first socket that failed (for example `EADDRINUSE`
    ///   from a bind); nothing is left open then.
    public static func start(
        name: String, context: ZMQContext? = nil, sockets: [SocketSpec], tick: Duration? = nil,
        maxPendingMessages: Int = 10_000, scheduling: Scheduling = .fromEnvironment, handler: InlineHandler? = nil
    ) async throws -> ZMQEventLoop {
        let loop = try ZMQEventLoop(tick: tick, maxPendingMessages: maxPendingMessages, handler: handler)
        let ownsContext = context == nil
        let context = try context ?? ZMQContext()
        let endpoints: [SocketID: [String]] = try await withCheckedThrowingContinuation { ready in
            let thread = Thread {
                sky_name_this_thread(name)  // the kernel's name (see its declaration)
                loop.kernelThreadID.store(sky_kernel_thread_id(), ordering: .relaxed)
                if scheduling.apply() { loop.appliedScheduling.withLock { $0 = scheduling } }
                let runner = ZMQEventLoopRunner(loop: loop, context: context, ownsContext: ownsContext)
                runner.run(initialSockets: sockets, ready: ready)
            }
            thread.start()
        }
        loop.endpointsByID.withLock { $0 = endpoints }
        return loop
    }

    /// The endpoints a socket was bound to, resolved: `tcp://127.0.0.1:*` comes back with its port.
    public func boundEndpoints(of socket: SocketID) -> [String] {
        endpointsByID.withLock { $0[socket] ?? [] }
    }

    /// Queues one message for sending. Never blocks; ignored after ``shutdown()``.
    public func send(_ frames: [[UInt8]], on socket: SocketID) {
        post([.send(Outbound(socket: socket, frames: frames))])
    }

    /// Queues many messages with one lock and at most one wake-up.
    public func send(_ batch: [Outbound]) {
        guard !batch.isEmpty else { return }
        post(batch.map { .send($0) })
    }

    /// Creates another socket on the loop's thread.
    /// - Returns: the resolved endpoints it was bound to.
    /// - Throws: ``SetupError`` if the socket could not be created, bound or connected.
    @discardableResult
    public func open(_ spec: SocketSpec) async throws -> [String] {
        let endpoints: [String] = try await withCheckedThrowingContinuation { done in
            if !post([.open(spec, done)]) {
                done.resume(throwing: ZMQError(code: ETERM, operation: "open(\(spec.id)) after shutdown"))
            }
        }
        endpointsByID.withLock { $0[spec.id] = endpoints }
        return endpoints
    }

    /// Opens a socket at the thread's next iteration without waiting for it: for an inline
    /// handler, which must not await. Commands posted after it (``send(_:on:)``,
    /// ``sendPeriodically(_:on:every:)``) find it open; messages an inline handler returns in the
    /// same batch do not, as they leave before the thread reads its mailbox again. The outcome
    /// comes back as ``Inbound/opened(_:_:)``.
    public func requestOpen(_ spec: SocketSpec) {
        post([.open(spec, nil)])
    }

    /// Hands `input` to the consumer as ``Inbound/input(_:)``, in order with what the thread
    /// reads; one lock and at most one wake-up, shared with everything posted before the thread
    /// woke.
    /// - Returns: `false` if the loop has stopped and the input was dropped.
    @discardableResult
    public func post(input: any Sendable) -> Bool {
        inputsPosted.add(1, ordering: .relaxed)
        return post(.input(input))
    }

    /// Makes the I/O thread itself send `frames` on `socket` every `interval` (a heartbeat), so the
    /// message keeps flowing however busy the rest of the process is. `nil` stops it; closing
    /// the socket stops it too.
    public func sendPeriodically(_ frames: [[UInt8]]?, on socket: SocketID, every interval: Duration) {
        post([.periodic(socket, frames, every: interval)])
    }

    /// Closes a socket on the loop's thread; messages still queued for it are kept for `linger` ms.
    public func close(_ socket: SocketID, linger: Int32 = 0) {
        post([.close(socket, linger: linger)])
    }

    /// Closes every socket on the loop's thread, ends ``inbound`` and stops the thread.
    /// Returns once the sockets are closed. Safe to call more than once.
    /// - Parameter linger: how long messages still queued may take to leave, in milliseconds.
    ///   With a context the loop owns, the call returns after they left or the time is up.
    public func shutdown(linger: Int32 = 0) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            requestShutdown(waiter: done, linger: linger)
        }
    }

    /// Starts the shutdown without waiting for it (for `deinit`s, which cannot await).
    public func requestShutdown() {
        requestShutdown(waiter: nil, linger: 0)
    }

    private func requestShutdown(waiter done: CheckedContinuation<Void, Never>?, linger: Int32) {
        let alreadyFinished = mailbox.withLock { box -> Bool in
            if box.finished { return true }
            if let done { box.shutdownWaiters.append(done) }
            return false
        }
        if alreadyFinished {
            done?.resume()
        } else {
            post([.shutdown(linger: linger)])
        }
    }

    /// Asks for a ``Inbound/tick`` right after the thread has polled its sockets once more,
    /// without waiting for the tick interval: for a handler with more timed work than it does in
    /// one go (the broker answering a deadline storm in slices), so that traffic is served
    /// between the slices. Call it from the handler; it costs no wake-up there.
    public func tickSoon() {
        tickRequested.store(true, ordering: .relaxed)
    }

    /// Asks for one ``Inbound/tick`` at `deadline`, replacing the one asked for before; `nil`
    /// asks for none. For an inline handler's timers: call it from the handler, and the thread
    /// sleeps in its poll until the deadline, with no other thread or task involved. (From
    /// another thread it takes effect at the thread's next wake-up.)
    public func setAlarm(_ deadline: ContinuousClock.Instant?) {
        alarmNanoseconds.store(deadline.map { time.nanoseconds(at: $0) } ?? .max, ordering: .relaxed)
    }

    /// ``setAlarm(_:)`` with the deadline `offset` after `origin`, a reading of
    /// ``LoopTime/clockNanoseconds()``: for a caller that keeps its times as durations since a
    /// start of its own (the client's timers), without an instant's arithmetic.
    public func setAlarm(_ offset: Duration?, after origin: Int64) {
        guard let offset else {
            alarmNanoseconds.store(.max, ordering: .relaxed)
            return
        }
        let deadline = LoopTime.time(origin - time.originNanoseconds, plus: LoopTime.nanoseconds(offset))
        alarmNanoseconds.store(deadline, ordering: .relaxed)
    }

    /// The alarm's deadline, if one is set.
    var alarm: ContinuousClock.Instant? {
        let nanoseconds = alarmNanoseconds.load(ordering: .relaxed)
        return nanoseconds == .max ? nil : time.instant(at: nanoseconds)
    }

    /// Clears the alarm if it is due at `now` (``time``'s nanoseconds); returns whether it was.
    func takeAlarm(ifDueAt now: Int64) -> Bool {
        let nanoseconds = alarmNanoseconds.load(ordering: .relaxed)
        guard nanoseconds != .max, nanoseconds <= now else { return false }
        return alarmNanoseconds.compareExchange(expected: nanoseconds, desired: .max, ordering: .relaxed).exchanged
    }

    /// The longest time the thread worked without polling its sockets since the last call (from
    /// a wake-up to the next poll: reading, the inline handler, sending); resets it.
    public func takeLongestIteration() -> Duration {
        .nanoseconds(longestIterationNanoseconds.exchange(0, ordering: .relaxed))
    }

    /// Messages that had to wait in the thread's send queue so far (for tests and diagnostics).
    var blockedSendCount: Int { blockedSends.load(ordering: .relaxed) }

    /// Whether the thread stopped reading for a consumer that fell behind (for tests).
    var isReadingPaused: Bool { mailbox.withLock { $0.readingPaused } }

    /// Messages waiting and whether reading is paused, read together (for tests: the thread may
    /// resume and read between two separate reads).
    var flowControlState: (pending: Int, paused: Bool) {
        mailbox.withLock { ($0.pendingMessages, $0.readingPaused) }
    }

    /// Messages yielded and not yet consumed (for tests and diagnostics).
    var pendingMessageCount: Int { mailbox.withLock { $0.pendingMessages } }

    /// The consumer took a batch; wakes the thread if it had stopped reading for want of that.
    func consumed(messages: Int) {
        guard messages > 0 else { return }
        let resume = mailbox.withLock { box -> Bool in
            box.pendingMessages -= messages
            guard box.readingPaused, box.pendingMessages <= resumeBelow else { return false }
            box.readingPaused = false
            if box.wakePending { return false }
            box.wakePending = true
            mailPending.store(true, ordering: .releasing)
            return true
        }
        if resume { wakeThread() }
    }

    /// Appends one command (without the array a batch needs: this is every client call's path).
    /// - Returns: `false` if the loop has stopped and the command was not accepted.
    @discardableResult
    private func post(_ command: Command) -> Bool {
        enqueue { $0.append(command) }
    }

    /// Appends commands.
    /// - Returns: `false` if the loop has stopped and the commands were not accepted.
    @discardableResult
    private func post(_ commands: [Command]) -> Bool {
        enqueue { $0.append(contentsOf: commands) }
    }

    /// Appends to the mailbox with `append` and wakes the thread if it is not already awake for
    /// earlier commands. Posted from the thread itself (by a task that prefers the loop as its
    /// executor), it needs no wake-up: the thread looks at its mailbox before it sleeps.
    private func enqueue(_ append: (inout [Command]) -> Void) -> Bool {
        let (accepted, wake) = mailbox.withLock { box -> (Bool, Bool) in
            if box.stopped { return (false, false) }
            append(&box.commands)
            if box.wakePending { return (true, false) }
            box.wakePending = true
            mailPending.store(true, ordering: .releasing)
            return (true, true)
        }
        if wake { wakeThread() }
        return accepted
    }

    /// Makes the thread take its mailbox before it sleeps again: a signal from another thread,
    /// a flag from the thread itself.
    func wakeThread() {
        if isOnLoopThread {
            queuedOnThread.store(true, ordering: .relaxed)
        } else {
            wakeSignals.add(1, ordering: .relaxed)
            wake.signal()
        }
    }
}
