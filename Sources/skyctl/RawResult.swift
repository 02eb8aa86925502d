import SkyProtocol

/// A job's result as its handler encoded it, for printing as it is: read through ``Coder``,
/// which hands the bytes over undecoded.
struct RawResult: Codable, Sendable {
    var bytes: [UInt8]

    struct Coder: TaskCoder {
        struct NotRaw: Error, CustomStringConvertible {
            var description: String { "skyctl reads results only as their bytes" }
        }

        func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
            guard let raw = value as? RawResult else { throw NotRaw() }
            return raw.bytes
        }

        func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
            guard let raw = RawResult(bytes: bytes) as? Value else { throw NotRaw() }
            return raw
        }
    }
}
