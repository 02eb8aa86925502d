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
        let completion = try await call { deadline in
            await self.takesTrace(by: deadline) ? SkyTracing.frame(for: context, tracer: tracer) : nil
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

    /// Whether the broker of this connection takes trace frames (``brokerFeatures(by:)``).
    func takesTrace(by deadline: Duration?) async -> Bool {
        await brokerFeatures(by: deadline)?.takesTrace ?? false
    }
}
