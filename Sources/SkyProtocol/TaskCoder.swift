import Foundation
import SkyJSON

/// Turns tasks and results into payload bytes and back. Client and worker must use the same
/// coder for a service; the broker never looks at payloads, so any format works.
public protocol TaskCoder: Sendable {
    func encode<Value: Encodable>(_ value: Value) throws -> [UInt8]
    func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value
}

/// JSON, the default: readable, and easy to speak from other languages.
///
/// Keys are sorted, so equal tasks encode to equal bytes; the client's coalescing of equal
/// concurrent tasks depends on it (without sorting, key order can differ between two encodings
/// of the same value).
///
/// Both directions go through `CanonicalJSON`, which writes and reads the common shapes itself
/// and leaves the rest to Foundation, with the same bytes and values: Foundation's coders made a
/// typed call cost the client twice a raw request in the typed path's profile.
public struct JSONTaskCoder: TaskCoder {
    public init() {}

    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        try CanonicalJSON.encode(value)
    }

    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try CanonicalJSON.decode(type, from: bytes)
    }
}

/// Binary property lists: more compact than JSON for numeric data.
public struct PropertyListTaskCoder: TaskCoder {
    public init() {}

    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        return Array(try encoder.encode(value))
    }

    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try PropertyListDecoder().decode(type, from: Data(bytes))
    }
}

extension TaskCoder where Self == JSONTaskCoder {
    /// `coder: .json`
    public static var json: JSONTaskCoder { JSONTaskCoder() }
}

extension TaskCoder where Self == PropertyListTaskCoder {
    /// `coder: .propertyList`
    public static var propertyList: PropertyListTaskCoder { PropertyListTaskCoder() }
}
