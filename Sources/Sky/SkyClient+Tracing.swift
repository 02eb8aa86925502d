import Instrumentation
import SkyProtocol
import SkyTracing
import Tracing

extension SkyClient {
    /// A call as a client span: its context travels in the request's trace frame (once the
    /// broker said it takes one), so the broker's span and the worker's handler join the trace.
    nonisolated func executeTraced(
        service: String, body: [UInt8], options: ScanOptions, tracer: some Tracer
    ) async throws -> Completion {
        try await withCallSpan(service: service, tracer: tracer) { frame in
            try await self.executeMeasured(service: service, body: body, options: options, trace: frame)
        }
    }

    /// Runs `call` inside a client span, given what makes the trace frame to send: the span's
    /// context, once the broker of this connection said it takes one.
    nonisolated func withCallSpan(
        service: String, tracer: some Tracer, _ call: (@escaping TraceFrameSource) async throws -> Completion
    ) async throws -> Completion {
        let span = tracer.startSpan(
            "sky.call \(service)", context: ServiceContext.current ?? .topLevel, ofKind: .client)
        defer { span.end() }
        span.attributes[SkyTracing.Attribute.system] = "sky"
        span.attributes[SkyTracing.Attribute.service] = service
        let context = span.context
        let completion = try await call {
            await self.takesTrace() ? SkyTracing.frame(for: context, tracer: tracer) : nil
        }
        span.attributes[SkyTracing.Attribute.attempt] = completion.attempts
        if case .failure(let error) = completion.result {
            span.attributes[SkyTracing.Attribute.status] = error.code.rawValue
            span.setStatus(SpanStatus(code: .error, message: "\(error)"))
        } else {
            span.attributes[SkyTracing.Attribute.status] = "ok"
        }
        return completion
    }

    /// Whether the broker takes trace frames: asked with `mmi.features` once per connection
    /// (a reconnect may reach another broker); a broker that predates it answers
    /// `unknownService` at once. Calls that come meanwhile wait for the one answer.
    func takesTrace() async -> Bool {
        let epoch = shell.machine.withLock { $0.table.connectionEpoch }
        if let known = traceFeature, known.epoch == epoch { return await known.answer.value }
        let answer = Task { await self.askFeatures(epoch: epoch) }
        traceFeature = (epoch, answer)
        return await answer.value
    }

    private func askFeatures(epoch: UInt64) async -> Bool {
        let completion = try? await executeMeasured(
            service: BrokerService.features, body: [],
            options: ScanOptions(timeout: configuration.connectTimeout, retry: .never))
        switch completion?.result {
        case .success(let body):
            let takes = String(decoding: body, as: UTF8.self).split(separator: "\n").contains {
                $0 == TraceContext.feature
            }
            if takes { shell.post(.brokerTakesTrace(epoch: epoch)) }
            return takes
        case .failure(let error) where error.code == .unknownService:
            return false
        default:
            // No answer (no broker yet, cancelled): ask again with the next call.
            traceFeature = nil
            return false
        }
    }
}
