import ArgumentParser
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
                    throw CocoaError(.fileWriteNoPermission)
                }
            }
            output = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            output.seekToEndOfFile()
        }
        self.program = program
        // W3C-sized random ids, so that traces from several processes never collide.
        tracer = InMemoryTracer(
            idGenerator: .init(nextTraceID: { Self.hex(bytes: 16) }, nextSpanID: { Self.hex(bytes: 8) }),
            recordInjections: false, recordExtractions: false)
        InstrumentationSystem.bootstrap(tracer)
        let thread = Thread { [self] in
            while true {
                usleep(100_000)
                flush()
            }
        }
        thread.name = "trace-log"
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

    private static func hex(bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
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
