import Foundation

/// JSON with sorted keys and unescaped slashes: equal values give equal bytes, and lines read
/// the same on every run. Used for task payloads, events, snapshots and tool output alike, and
/// to read task payloads back.
package enum CanonicalJSON {
    /// Written by `JSONByteWriter` when it can (every synthesized `Codable` shape), otherwise by
    /// Foundation's encoder; the bytes are the same either way.
    package static func encode(_ value: some Encodable) throws -> [UInt8] {
        if let bytes = try JSONByteWriter.encode(value) { return bytes }
        return try foundationEncode(value)
    }

    /// What `encode` gives for values the writer leaves to Foundation (and the reference the
    /// writer's tests compare against).
    static func foundationEncode(_ value: some Encodable) throws -> [UInt8] {
        Array(try encoder.encode(value))
    }

    /// `type` read from JSON `bytes`: by `JSONByteReader` when it can, otherwise by Foundation's
    /// decoder; the value (or the error) is the same either way.
    package static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        if let value = try JSONByteReader.decode(type, from: bytes) { return value }
        return try foundationDecode(type, from: bytes)
    }

    /// What `decode` gives for bytes the reader leaves to Foundation.
    static func foundationDecode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try decoder.decode(type, from: Data(bytes))
    }

    /// Whether `bytes` are one JSON value (a document, or a bare string, number, `true`,
    /// `false` or `null`).
    package static func isValid(_ bytes: [UInt8]) -> Bool {
        var parser = JSONParser(bytes: bytes)
        if (try? parser.document()) != nil { return true }
        // What the parser leaves to Foundation (rare forms), Foundation decides.
        return (try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)) != nil
    }

    /// One for every call (thread-safe).
    private static let decoder = JSONDecoder()

    /// Sorted keys, slashes left alone; one for every call (thread-safe once configured).
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// One line of JSON text; `fallback` if the value cannot be encoded.
    package static func line(_ value: some Encodable, fallback: String = "{}") -> String {
        (try? encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? fallback
    }
}
