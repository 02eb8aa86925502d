import Instrumentation
import SkyProtocol
import Tracing

/// Tracing at the three hops, through swift-distributed-tracing: the trace frame of a REQUEST
/// (``TraceContext``) as the carrier a tracer injects into and extracts from.
///
/// Every entry point first asks ``active(_:)`` for a tracer: with none bootstrapped (the
/// no-op tracer) there is nothing to do, and the untraced path costs nothing beyond that check.
package enum SkyTracing {
    /// The tracer to use: `tracer` if given, else the process's (``InstrumentationSystem``);
    /// nil when that is the no-op tracer.
    package static func active(_ tracer: (any Tracer)? = nil) -> (any Tracer)? {
        let chosen = tracer ?? InstrumentationSystem.tracer
        return chosen is NoOpTracer ? nil : chosen
    }

    /// The trace frame for `context` (what `tracer` injects); nil when it injects nothing.
    /// - Parameter base: a frame to start from: its fields the tracer does not write pass on
    ///   unchanged (a broker whose tracer speaks another format keeps the W3C fields intact).
    package static func frame(for context: ServiceContext, tracer: some Tracer, base: [UInt8]? = nil) -> [UInt8]? {
        var carrier = base.map { TraceContext(frame: $0) } ?? TraceContext()
        tracer.inject(context, into: &carrier, using: TraceContextInjector())
        return carrier.frame
    }

    /// The context a trace frame carries, on top of `base`; `base` itself without a frame.
    package static func context(from frame: [UInt8]?, tracer: some Tracer, base: ServiceContext = .topLevel)
        -> ServiceContext
    {
        var context = base
        guard let frame else { return context }
        tracer.extract(TraceContext(frame: frame), into: &context, using: TraceContextExtractor())
        return context
    }

    /// Attribute names, after OpenTelemetry's messaging conventions where one fits.
    package enum Attribute {
        package static let system = "messaging.system"
        package static let service = "sky.service"
        package static let requestID = "sky.request_id"
        package static let attempt = "sky.attempt"
        package static let delivery = "sky.delivery"
        package static let worker = "sky.worker"
        package static let status = "sky.status"
        package static let queueWaitMilliseconds = "sky.queue_wait_ms"
        package static let jobID = "sky.job_id"
    }
}

package struct TraceContextInjector: Injector {
    package init() {}

    package func inject(_ value: String, forKey key: String, into carrier: inout TraceContext) {
        carrier.set(key, value)
    }
}

package struct TraceContextExtractor: Extractor {
    package init() {}

    package func extract(key: String, from carrier: TraceContext) -> String? {
        carrier[key]
    }
}
