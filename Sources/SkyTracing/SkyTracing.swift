import Instrumentation
import SkyProtocol
import Tracing

/// Tracing at the three hops, through swift-distributed-tracing: the trace frame of a REQUEST
/// (``TraceContext``) as the carrier a tracer injects into and extracts from.
///
/// Every entry point first asks ``active(_:)`` for a tracer: with none bootstrapped (the
/// no-op tracer) there is nothing to do, and the untraced path costs nothing beyond that check.
public enum SkyTracing {
    /// The tracer to use: `tracer` if given, else the process's (``InstrumentationSystem``);
    /// nil when that is the no-op tracer.
    public static func active(_ tracer: (any Tracer)? = nil) -> (any Tracer)? {
        let chosen = tracer ?? InstrumentationSystem.tracer
        return chosen is NoOpTracer ? nil : chosen
    }

    /// The trace frame for `context` (what `tracer` injects); nil when it injects nothing.
    /// - Parameter base: a frame to start from: its fields the tracer does not write pass on
    ///   unchanged (a broker whose tracer speaks another format keeps the W3C fields intact).
    public static func frame(for context: ServiceContext, tracer: some Tracer, base: [UInt8]? = nil) -> [UInt8]? {
        var carrier = base.map { TraceContext(frame: $0) } ?? TraceContext()
        tracer.inject(context, into: &carrier, using: TraceContextInjector())
        return carrier.frame
    }

    /// The context a trace frame carries, on top of `base`; `base` itself without a frame.
    public static func context(from frame: [UInt8]?, tracer: some Tracer, base: ServiceContext = .topLevel)
        -> ServiceContext
    {
        var context = base
        guard let frame else { return context }
        tracer.extract(TraceContext(frame: frame), into: &context, using: TraceContextExtractor())
        return context
    }

    /// Attribute names, after OpenTelemetry's messaging conventions where one fits.
    public enum Attribute {
        public static let system = "messaging.system"
        public static let service = "sky.service"
        public static let requestID = "sky.request_id"
        public static let attempt = "sky.attempt"
        public static let delivery = "sky.delivery"
        public static let worker = "sky.worker"
        public static let status = "sky.status"
        public static let queueWaitMilliseconds = "sky.queue_wait_ms"
        public static let jobID = "sky.job_id"
    }
}

public struct TraceContextInjector: Injector {
    public init() {}

    public func inject(_ value: String, forKey key: String, into carrier: inout TraceContext) {
        carrier.set(key, value)
    }
}

public struct TraceContextExtractor: Extractor {
    public init() {}

    public func extract(key: String, from carrier: TraceContext) -> String? {
        carrier[key]
    }
}
