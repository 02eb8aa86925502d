import Logging
import SkyProtocol
import SkyZMQ

extension SkyClient {
    /// Starts the I/O thread and connects to the first endpoint, once: concurrent first callers
    /// wait for the same start.
    func startIfNeeded() async throws {
        if loop != nil { return }
        if starting == nil {
            let spec = brokerSocket(number: 0, endpoint: endpoints[0])
            starting = Task { try await ZMQEventLoop.start(name: "skyclient-io", sockets: [spec]) }
        }
        let started: ZMQEventLoop
        do {
            started = try await starting!.value
        } catch {
            starting = nil
            throw SkyError.brokerUnreachable("cannot connect to \(endpoints[0]): \(error)")
        }
        guard loop == nil else { return }
        loop = started
        if closed {
            await started.shutdown()
            throw SkyError.clientClosed
        }
        let inbound = started.inbound
        pump = Task { [weak self] in
            for await batch in inbound {
                guard let self else { return }
                await self.receive(batch)
            }
        }
        rearmTimer()
    }

    /// The DEALER to one broker endpoint, watched for connections made and lost.
    func brokerSocket(number: Int, endpoint: String) -> ZMQEventLoop.SocketSpec {
        socket = ZMQEventLoop.SocketID(number, name: "broker")
        // No high-water mark: the request table bounds what is in flight. ZMTP heartbeats notice
        // a broker host that vanished without closing the connection.
        return .brokerDealer(
            id: socket, endpoint: endpoint, highWaterMark: 0, credentials: configuration.credentials,
            options: [
                .routingID(identity), .heartbeatInterval(milliseconds: 1000), .heartbeatTimeout(milliseconds: 3000),
            ],
            monitor: [.handshakeSucceeded, .disconnected, .handshakeFailed])
    }

    /// Everything the I/O thread received since the last batch.
    func receive(_ batch: [ZMQEventLoop.Inbound]) {
        var actions: [RequestTable.Action] = []
        for inbound in batch {
            switch inbound {
            case .message(let from, let message) where from == socket:
                guard case .reply(let reply) = try? BrokerToClient.decode(message.frames) else {
                    configuration.logger.warning("dropped a message from the broker that is not a Sky reply")
                    continue
                }
                if reply.status == .wrongEndpoint {
                    // A configuration mistake, not a failure of this call: every call fails with it.
                    actions += refuse(.wrongEndpoint(RemoteErrorBody(decoding: reply.body).message))
                    continue
                }
                actions += table.received(reply, now: time.now())
            case .message(let from, let message):
                guard let sink = eventSinks[from] else { continue }
                if let event = try? SkyEvent.decode(message.frames) { sink.yield(event) }
            case .monitor(let from, let event) where from == socket:
                actions += connectionEvent(event)
            case .monitor(let from, let event) where event.kind == .handshakeFailedAuth:
                // An events subscription whose key the broker does not admit as a watcher's.
                guard let sink = eventSinks.removeValue(forKey: from) else { continue }
                eventRefusals[from] =
                    "\(event.endpoint) refused this client's key for events (ZAP status \(event.value)): it is not on the broker's watcher allow-list (skybroker --watcher-keys)"
                sink.finish()
            case .monitor, .sendFailed, .tick, .input, .opened:
                continue
            }
        }
        perform(actions)
    }

    private func connectionEvent(_ event: ZMQMonitorEvent) -> [RequestTable.Action] {
        switch event.kind {
        case .handshakeSucceeded:
            handshake.succeeded()
            configuration.logger.debug("connected to the broker", metadata: ["endpoint": "\(event.endpoint)"])
            let waiting = connectionWaiters
            connectionWaiters.removeAll()
            for waiter in waiting.values { waiter.resume() }
            return table.connectionUp(now: time.now())
        case .disconnected:
            if handshake.closedBeforeHandshake() {
                // A CURVE server that cannot open our HELLO (we hold the wrong server key) just
                // closes the connection, and one that gets a NULL greeting often closes before
                // libzmq reports the mechanism mismatch: both look like this, again and again.
                return refuseCredentials(
                    "\(event.endpoint) closed the connection during the handshake \(HandshakeWatch.strikes) times in a row: "
                        + (configuration.credentials == nil
                            ? "the broker probably requires CURVE; give this client credentials"
                            : "the broker public key given to this client is probably not the broker's"))
            }
            configuration.logger.info(
                "lost the connection to the broker; reconnecting", metadata: ["endpoint": "\(event.endpoint)"])
            table.connectionDown(now: time.now())
        case .handshakeFailedAuth:
            return refuseCredentials(
                "\(event.endpoint) refused this client's key (ZAP status \(event.value)): it is not on the broker's client allow-list"
            )
        case .handshakeFailedProtocol:
            return refuseCredentials(
                "the security handshake with \(event.endpoint) failed (libzmq protocol error 0x\(String(UInt32(bitPattern: event.value), radix: 16))): "
                    + (configuration.credentials == nil
                        ? "the broker requires CURVE and this client has no credentials"
                        : "the broker does not speak CURVE, or rejected these keys"))
        case .handshakeFailedNoDetail:
            configuration.logger.warning(
                "handshake with the broker failed",
                metadata: ["endpoint": "\(event.endpoint)", "code": "\(event.value)"])
        default:
            break
        }
        return []
    }

    /// The broker refused this client's credentials: every call fails with
    /// ``SkyError/unauthorized(_:)`` now and from now on (see ``refuse(_:)``).
    private func refuseCredentials(_ reason: String) -> [RequestTable.Action] {
        refuse(.unauthorized(reason))
    }

    /// The broker will not serve this client as configured (its keys, or the endpoint it was
    /// given): every call fails with `error` now and from now on, and the connection is closed,
    /// so the client does not knock again and again.
    private func refuse(_ error: SkyError) -> [RequestTable.Action] {
        guard refusal == nil else { return [] }
        configuration.logger.error("giving up on this broker", metadata: ["reason": "\(error)"])
        refusal = error
        loop?.close(socket)
        for waiter in connectionWaiters.values { waiter.resume(throwing: error) }
        connectionWaiters.removeAll()
        return table.failAll(error)
    }

    /// Carries out what the request table decided, then re-arms the timer.
    func perform(_ actions: [RequestTable.Action]) {
        var outbound: [ZMQEventLoop.Outbound] = []
        for action in actions {
            switch action {
            case .send(let request):
                outbound.append(.init(socket: socket, frames: ClientToBroker.request(request).encode()))
            case .cancel(let requestID):
                outbound.append(.init(socket: socket, frames: ClientToBroker.cancel(requestID).encode()))
            case .succeed(let ids, let body, let attempts):
                for id in ids {
                    waiters.removeValue(forKey: id)?.resume(
                        returning: Completion(result: .success(body), attempts: attempts))
                }
            case .fail(let ids, let error, let attempts):
                for id in ids {
                    waiters.removeValue(forKey: id)?.resume(
                        returning: Completion(result: .failure(error), attempts: attempts))
                }
            case .switchEndpoint(let index):
                switchEndpoint(to: index)
            }
        }
        if !outbound.isEmpty { loop?.send(outbound) }
        rearmTimer()
    }

    /// Gives up the current endpoint for `endpoints[index]`: a new socket, whose first handshake
    /// makes the table send every call again.
    private func switchEndpoint(to index: Int) {
        guard let loop, !closed else { return }
        configuration.logger.warning(
            "broker endpoint unreachable; trying the next",
            metadata: ["endpoint": "\(endpoints[endpointIndex])", "next": "\(endpoints[index])"])
        loop.close(socket)
        endpointIndex = index
        let spec = brokerSocket(number: nextSocketNumber, endpoint: endpoints[index])
        nextSocketNumber += 1
        Task {
            do {
                try await loop.open(spec)
            } catch {
                configuration.logger.error(
                    "cannot connect to the broker",
                    metadata: ["endpoint": "\(spec.connect.first ?? "")", "error": "\(error)"])
            }
        }
    }

    /// One timer for the whole table, armed at its earliest deadline. A timer armed earlier than
    /// needed, or with nothing left to time, is left to fire (into a table with nothing due):
    /// cancelling and re-creating it around every call woke a timer thread twice per call.
    func rearmTimer() {
        guard !closed else {
            timer?.cancel()
            timer = nil
            armedDeadline = nil
            return
        }
        guard let next = table.nextDeadline() else { return }
        if let armed = armedDeadline, armed <= next, timer != nil { return }
        timer?.cancel()
        armedDeadline = next
        let time = time
        timer = Task { [weak self] in
            guard (try? await time.sleep(next)) != nil else { return }
            await self?.timerFired()
        }
    }

    private func timerFired() {
        timer = nil
        armedDeadline = nil
        perform(table.expire(now: time.now()))
    }

    /// Returns once a connection to the broker is up; throws `CancellationError` if cancelled.
    func waitForConnection() async throws {
        try await startIfNeeded()
        if table.isConnected { return }
        nextWaiter += 1
        let id = nextWaiter
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if table.isConnected {
                    continuation.resume()
                } else if Task.isCancelled || closed {
                    continuation.resume(throwing: closed ? SkyError.clientClosed : CancellationError())
                } else {
                    connectionWaiters[id] = continuation
                }
            }
        } onCancel: {
            Task { await self.stopWaitingForConnection(id) }
        }
    }

    private func stopWaitingForConnection(_ id: RequestTable.WaiterID) {
        connectionWaiters.removeValue(forKey: id)?.resume(throwing: CancellationError())
    }
}
