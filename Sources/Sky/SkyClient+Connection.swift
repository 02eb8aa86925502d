import SkyZMQ
import Synchronization

extension SkyClient {
    /// Starts the I/O thread, with the state machine as its inline handler, and connects to the
    /// first endpoint, once: concurrent first callers wait for the same start.
    func startIfNeeded() async throws {
        if shell.loop.load() != nil { return }
        guard !closed else { throw SkyError.clientClosed }
        if starting == nil {
            let shell = shell
            let spec = shell.brokerSocket(0, endpoint: endpoints[0])
            // Read here: inside the task it would capture the client, which its `deinit` (that
            // lets the handler go of the shell) then waited for the task to release.
            let target = handlerTarget
            starting = Task {
                // Started without sockets, so that the handler knows its loop before the broker
                // socket's first event (see ``Shell/handlerLoop``).
                let loop = try await ZMQEventLoop.start(name: "skyclient-io", sockets: []) { batch, outbound in
                    target.handle(&batch, into: &outbound)
                }
                shell.handlerLoop.withLock { $0 = loop }
                do {
                    try await loop.open(spec)
                } catch {
                    await loop.shutdown()
                    throw error
                }
                return loop
            }
        }
        let started: ZMQEventLoop
        do {
            started = try await starting!.value
        } catch {
            starting = nil
            throw SkyError.brokerUnreachable("cannot connect to \(endpoints[0]): \(error)")
        }
        if shell.loop.load() != nil { return }
        if closed {
            await started.shutdown()
            throw SkyError.clientClosed
        }
        _ = shell.loop.storeIfNil(started)
        // Arms the machine's timers (a failover deadline may already be set).
        shell.post(.timer)
    }

    /// The shell as its loop's handler reaches it: held strongly until the client goes
    /// (``SkyClient`` lets go of it in its `deinit`, and the loop's thread then stops), so that
    /// the loop does not keep the shell alive after its client.
    ///
    /// Not a weak reference: a weak reference to an object moves its reference counts to a side
    /// table for good, and every retain and release of the shell (several on every call: a
    /// call's handle holds it) then took the runtime's slow path. The lock is taken once a
    /// wake-up of the I/O thread.
    final class HandlerTarget: Sendable {
        private let shell: Mutex<Shell?>

        init(_ shell: Shell) { self.shell = Mutex(shell) }

        /// Runs the shell's handler, unless the client has gone.
        func handle(_ batch: inout [ZMQEventLoop.Inbound], into outbound: inout ZMQEventLoop.Sender) {
            shell.withLock { $0 }?.handle(&batch, into: &outbound)
        }

        /// The client has gone: the handler does nothing from now on.
        func release() {
            // Taken out under the lock and released after it: the shell's deinit must not run
            // while the lock is held.
            let shell = self.shell.withLock { $0.take() }
            _ = consume shell
        }
    }

    /// What the transport showed of the broker's endpoint while no connection is up ("nothing
    /// listens there", "accepts TCP connections but completes no ZeroMQ handshake"); `nil`
    /// while connected or before anything was seen. For watchers that wait on: said, a port of
    /// another kind of server is named instead of "no answer".
    package nonisolated var unreachableCause: String? {
        shell.machine.withLock { $0.table.isConnected ? nil : $0.table.unreachableHint }
    }

    /// Whether this client has had a connection to the broker, now or before.
    nonisolated var hasReachedBroker: Bool {
        shell.machine.withLock { $0.table.isConnected || $0.table.connectionEpoch > 0 }
    }

    /// Returns once a connection to the broker is up; throws `CancellationError` if cancelled.
    func waitForConnection() async throws {
        try await startIfNeeded()
        try await shell.waitForConnection()
    }
}

extension SkyClient {
    /// Asks the broker once whether this client reaches it as a client: a mistake in the
    /// endpoint (another port of the broker's) or in the keys, which retrying cannot fix, comes
    /// back; anything else (a broker down or restarting) is `nil`. For the watchers (skywatch,
    /// skyweb), whose events subscription alone waited forever on a wrong port.
    /// It asks `mmi.features`, which the client asks on every connection anyway (a snapshot
    /// request of its own would be one more than a watcher's scripted broker in the tests
    /// expects), and reads the refusal the answer left in the client's machine.
    package func endpointMistake() async -> SkyError? {
        _ = await brokerFeatures()
        guard let refusal = shell.machine.withLock({ $0.refusal }),
            [.unauthorized, .wrongEndpoint].contains(refusal.code)
        else { return nil }
        return refusal
    }
}
