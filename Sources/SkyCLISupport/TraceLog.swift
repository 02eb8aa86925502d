import ArgumentParser
import CSkySystem
import Foundation
import InMemoryTracing
import Instrumentation
import Tracing

/// `--trace-log PATH`: records this process's spans and appends each finished one to PATH as a
/// JSON line (trace, span and parent ids, name, kind, times, attributes). For a look at traces
/// without a tracing backend, and for tests that check the links across processes. In
/// production an application bootstraps its own tracer (swift-otel) instead; see
/// docs/operations.md "Tracing".
public struct TraceLogOptions: ParsableArguments {
    @Option(
        help: """
            Record spans and append each finished one to PATH as a JSON line ('-': standard \
            error). Off by default.
            """)
    public var traceLog: String?

    public init() {}

    /// Bootstraps the tracer if asked for; exits naming the cause when PATH cannot be opened.
    public func start(program: String) -> TraceLog? {
        guard let traceLog else { return nil }
        do {
            return try TraceLog(path: traceLog, program: program)
        } catch {
            ProcessSetup.fail(program, "cannot write the trace log \(traceLog): \(error); pick another --trace-log")
        }
    }
}

public final class TraceLog: Sendable {
    private let tracer: InMemoryTracer
    private let output: FileHandle
    private let program: String

    init(path: String, program: String) throws {
        if path == "-" {
            output = .standardError
        } else {
            if !FileManager.default.fileExists(atPath: path) {
                guard FileManager.default.createFile(atPath: path, contents: nil) else {
                    throw TraceLogError(
                        description: "it cannot be created (does its folder exist, and may this user write there?)")
                }
            }
            guard let handle = FileHandle(forWritingAtPath: path) else {
                throw TraceLogError(description: "it cannot be opened for writing")
            }
            output = handle
            output.seekToEndOfFile()
        }
        self.program = program
        tracer = InMemoryTracer(idGenerator: TraceLogTracer.w3cIDs, recordInjections: false, recordExtractions: false)
        InstrumentationSystem.bootstrap(TraceLogTracer(tracer))
        let thread = Thread { [self] in
            sky_name_this_thread("trace-log")
            while true {
                usleep(100_000)
                flush()
            }
        }
        thread.start()
    }

    /// Writes the spans finished so far.
    public func flush() {
        let spans = tracer.popFinishedSpans()
        guard !spans.isEmpty else { return }
        var text = ""
        for span in spans { text += line(span) + "\n" }
        output.write(Data(text.utf8))
    }

    private func line(_ span: FinishedInMemorySpan) -> String {
        var attributes: [String: String] = [:]
        span.attributes.forEach { key, value in attributes[key] = Self.text(value) }
        let record = SpanRecord(
            program: program, name: span.operationName, kind: "\(span.kind)", trace: span.traceID,
            span: span.spanID, parent: span.parentSpanID, startNanoseconds: span.startInstant.nanosecondsSinceEpoch,
            endNanoseconds: span.endInstant.nanosecondsSinceEpoch, attributes: attributes,
            error: span.status.flatMap { $0.code == .error ? ($0.message ?? "error") : nil })
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(record)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    private static func text(_ value: SpanAttribute) -> String {
        switch value {
        case .int32(let number): "\(number)"
        case .int64(let number): "\(number)"
        case .double(let number): "\(number)"
        case .bool(let flag): "\(flag)"
        case .string(let string): string
        default: "\(value)"
        }
    }

}

/// swift-distributed-tracing's in-memory tracer, speaking W3C Trace Context (`traceparent`) on
/// the wire instead of its own keys: so that a `--trace-log` broker or worker joins the traces
/// of clients and workers that export with swift-otel, and the other way round.
public struct TraceLogTracer: Tracer {
    public typealias Span = InMemorySpan

    public let base: InMemoryTracer

    /// Random ids of W3C's sizes (16 and 8 bytes, in hex), so that traces from several
    /// processes never collide and fit a `traceparent`.
    public static let w3cIDs = InMemoryTracer.IDGenerator(
        nextTraceID: { hex(bytes: 16) }, nextSpanID: { hex(bytes: 8) })

    public init(_ base: InMemoryTracer) {
        self.base = base
    }

    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> InMemorySpan {
        base.startSpan(
            operationName, context: context(), ofKind: kind, at: instant(), function: function, file: fileID,
            line: line)
    }

    public func forceFlush() { base.forceFlush() }

    public func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    public func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let traceparent = extractor.extract(key: "traceparent", from: carrier) else { return }
        let parts = traceparent.split(separator: "-")
        guard parts.count >= 4, parts[0].count == 2, parts[1].count == 32, parts[2].count == 16,
            parts[1].allSatisfy(\.isHexDigit), parts[2].allSatisfy(\.isHexDigit),
            parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" })
        else { return }
        context.inMemorySpanContext = InMemorySpanContext(
            traceID: String(parts[1]), spanID: String(parts[2]), parentSpanID: nil)
    }

    private static func hex(bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}

struct TraceLogError: Error, CustomStringConvertible {
    var description: String
}

/// One finished span, as a line of the trace log.
public struct SpanRecord: Codable, Sendable {
    public var program: String
    public var name: String
    public var kind: String
    public var trace: String
    public var span: String
    public var parent: String?
    public var startNanoseconds: UInt64
    public var endNanoseconds: UInt64
    public var attributes: [String: String]
    public var error: String?
}
