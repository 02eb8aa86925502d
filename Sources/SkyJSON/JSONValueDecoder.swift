/// The `Decoder` (and single-value container) that `JSONByteReader` hands each value: which
/// node it reads.
struct JSONValueDecoder: Decoder, SingleValueDecodingContainer {
    let reader: JSONByteReader
    let node: Int

    var codingPath: [any CodingKey] { reader.codingPath(to: node) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard reader.nodes[node].kind == .object else { throw reader.giveUp() }
        return KeyedDecodingContainer(JSONObjectDecodingContainer<Key>(reader: reader, object: node))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard reader.nodes[node].kind == .array else { throw reader.giveUp() }
        return JSONArrayDecodingContainer(reader: reader, array: node)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        self
    }

    func decodeNil() -> Bool { reader.isNull(node) }
    func decode(_ type: Bool.Type) throws -> Bool { try reader.bool(at: node) }
    func decode(_ type: String.Type) throws -> String { try reader.string(at: node) }
    func decode(_ type: Double.Type) throws -> Double { try reader.double(at: node) }
    func decode(_ type: Float.Type) throws -> Float { throw reader.giveUp() }
    func decode(_ type: Int.Type) throws -> Int { try reader.integer(type, at: node) }
    func decode(_ type: Int8.Type) throws -> Int8 { try reader.integer(type, at: node) }
    func decode(_ type: Int16.Type) throws -> Int16 { try reader.integer(type, at: node) }
    func decode(_ type: Int32.Type) throws -> Int32 { try reader.integer(type, at: node) }
    func decode(_ type: Int64.Type) throws -> Int64 { try reader.integer(type, at: node) }
    func decode(_ type: UInt.Type) throws -> UInt { try reader.integer(type, at: node) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try reader.integer(type, at: node) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try reader.integer(type, at: node) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try reader.integer(type, at: node) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try reader.integer(type, at: node) }
    func decode(_ type: Int128.Type) throws -> Int128 { throw reader.giveUp() }
    func decode(_ type: UInt128.Type) throws -> UInt128 { throw reader.giveUp() }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try reader.decode(type, at: node) }
}
