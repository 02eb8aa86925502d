import SkyProtocol

extension SkyClient {
    /// Runs a task given as an encoded payload and hands its outcome to `completion`, called
    /// exactly once: the callback form of ``request(service:body:options:)``.
    ///
    /// Why: an `async` call suspends its caller and resumes it from the I/O thread, where its
    /// reply lands: a continuation, a task switch and (for a caller on the cooperative pool) a
    /// thread woken, each call. Here the reply's thread runs `completion` at once, and a call
    /// started from inside a completion leaves in the same wake-up. For code that issues many
    /// small calls and does little with each answer: a load generator, a relay, a fan-out
    /// that counts results.
    ///
    /// `completion` runs on the client's I/O thread: it must not block or compute for long
    /// (while it runs, the thread reads no replies and sends no heartbeats); hand longer work
    /// to a task. It never runs inside this method, so a completion that starts another call
    /// (a retry) cannot recurse: a call the client refuses at once (an invalid timeout or
    /// deadline, a body over ``Configuration/maxRequestBytes``), and a call made after
    /// ``close()``, complete on a task of the pool; a call to an invalid service name is
    /// refused by the I/O thread, and completes there. A call that must first ask the broker
    /// something (the client's first call, a body over 1 KiB, a concurrency key,
    /// `keepIfAbandoned`), or that a tracer or a local fallback takes, runs as the `async` form
    /// does, in a task, and completes on that task.
    /// - Returns: the call's handle, to cancel it (``CallHandle/cancel()``).
    @discardableResult
    public nonisolated func request(
        service: String, body: [UInt8], options: ScanOptions? = nil,
        completion: @escaping @Sendable (Result<[UInt8], SkyError>) -> Void
    ) -> CallHandle {
        start(service: service, body: body, options: options ?? configuration.defaults, .resultHandler(completion))
    }

    /// Runs a task on some worker and hands its decoded result to `completion`, called exactly
    /// once: the callback form of ``scan(_:options:coder:)``, on the terms of
    /// ``request(service:body:options:completion:)`` (the result is decoded on the thread
    /// that runs `completion`).
    /// - Returns: the call's handle, to cancel it (``CallHandle/cancel()``).
    @discardableResult
    public nonisolated func scan<T: SkyTask>(
        _ task: T, options: ScanOptions? = nil, coder: some TaskCoder = .json,
        completion: @escaping @Sendable (Result<T.Result, SkyError>) -> Void
    ) -> CallHandle {
        let body: [UInt8]
        do {
            body = try coder.encode(task)
        } catch {
            let failure = SkyError.invalidTask("the task could not be encoded: \(error)")
            Task { completion(.failure(failure)) }
            return CallHandle(.none)
        }
        let decoding = CallWaiter.resultHandler { result in
            completion(
                result.flatMap { reply in
                    do {
                        return .success(try coder.decode(T.Result.self, from: reply))
                    } catch {
                        return .failure(.invalidResult(String(describing: error)))
                    }
                })
        }
        return start(service: T.service, body: body, options: options ?? configuration.defaults, consume decoding)
    }

    /// One call whose outcome goes to `waiter`: straight into the client's machine when
    /// nothing needs awaiting first, else through ``execute(service:body:options:)`` in a task.
    private nonisolated func start(
        service: String, body: [UInt8], options: ScanOptions, _ waiter: consuming CallWaiter
    ) -> CallHandle {
        guard goesStraightToTheMachine(body: body, options: options) else {
            let task = Task { [waiter] in
                do {
                    waiter.complete(try await execute(service: service, body: body, options: options))
                } catch {
                    // Only `CancellationError`: the handle cancelled the task.
                    waiter.complete(Completion(result: .failure(CallHandle.cancelledError), attempts: 0))
                }
            }
            return CallHandle(.task(task))
        }
        // Moved, not copied, on to the shell (each copy counted its closure's references).
        var finish = consume waiter
        if metrics.enabled {
            metrics.started()
            let (metrics, inner) = (metrics, finish)
            let started = ContinuousClock.now
            finish = .handler { completion in
                metrics.finished(
                    service, outcome: completion.outcome, attempts: completion.attempts,
                    after: ContinuousClock.now - started)
                inner.complete(completion)
            }
        }
        if let refused = refusedAtOnce(service: service, body: body, options: options, checkingName: false) {
            // Not on the caller's stack: a completion that retries at once would recurse.
            Task { [finish] in finish.complete(refused) }
            return CallHandle(.none)
        }
        let id = shell.call(
            RequestTable.Call(service: service, body: body, options: options, trace: nil, startedAt: nil),
            waiter: consume finish)
        return CallHandle(id.map { .waiter(shell, $0) } ?? .none)
    }
}
