/// A distributed-tracing context as it travels with a request: the fields a tracer injects
/// into a carrier (with W3C Trace Context, `traceparent` and `tracestate`), in the optional
/// trace frame of a REQUEST.
///
/// On the wire: UTF-8 lines `key: value` joined by `\n`, at most ``maxBytes`` bytes. Keys are
/// lowercase; values printable ASCII. Sky's broker stores and forwards the frame without reading
/// it (only its size is checked); a tracer that finds lines it cannot use ignores them, so a bad
/// trace context never fails a task.
public struct TraceContext: Sendable, Equatable {
    public var fields: [Field]

    public struct Field: Sendable, Equatable {
        public var key: String
        public var value: String

        public init(key: String, value: String) {
            self.key = key
            self.value = value
        }
    }

    /// Longest trace frame accepted: a `traceparent` (55 bytes) and a `tracestate` (at most 512
    /// by W3C's rules) with room to spare.
    public static let maxBytes = 1024
    /// What a client, worker or broker announces when it carries trace frames.
    public static let feature = "trace-context"

    public init(fields: [Field] = []) {
        self.fields = fields
    }

    /// Sets a field (a tracer's injector), replacing one of the same key; keys and values that
    /// cannot travel are left out.
    public mutating func set(_ key: String, _ value: String) {
        let key = key.lowercased()
        guard Self.isKey(key), Self.isValue(value) else { return }
        if let index = fields.firstIndex(where: { $0.key == key }) {
            fields[index].value = value
        } else {
            fields.append(Field(key: key, value: value))
        }
    }

    public subscript(key: String) -> String? {
        let key = key.lowercased()
        return fields.first { $0.key == key }?.value
    }

    /// The frame; nil when empty or over ``maxBytes`` (then nothing is sent).
    public var frame: [UInt8]? {
        guard !fields.isEmpty else { return nil }
        let bytes = Array(fields.map { "\($0.key): \($0.value)" }.joined(separator: "\n").utf8)
        return bytes.count <= Self.maxBytes ? bytes : nil
    }

    /// Reads a frame, keeping the lines that are well formed.
    public init(frame: [UInt8]) {
        var fields: [Field] = []
        for line in String(decoding: frame.prefix(Self.maxBytes), as: UTF8.self).split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = String(line[..<colon]).lowercased()
            let value = String(line[line.index(after: colon)...].drop { $0 == " " })
            if Self.isKey(key), Self.isValue(value) { fields.append(Field(key: key, value: value)) }
        }
        self.fields = fields
    }

    private static func isKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.count <= 64
            && key.utf8.allSatisfy {
                ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F || $0 == 0x2E
            }
    }

    private static func isValue(_ value: String) -> Bool {
        value.utf8.count <= maxBytes && value.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }
    }
}
