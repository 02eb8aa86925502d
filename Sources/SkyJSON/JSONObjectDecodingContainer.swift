/// A keyed container of `JSONByteReader`: each call finds its key among the object's members.
struct JSONObjectDecodingContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let reader: JSONByteReader
    let object: Int

    var codingPath: [any CodingKey] { reader.codingPath(to: object) }

    var allKeys: [Key] {
        guard let keys = try? reader.keys(of: object) else { return [] }
        return keys.compactMap { Key(stringValue: $0) }
    }

    func contains(_ key: Key) -> Bool {
        (try? reader.member(key.stringValue, of: object)) != nil
    }

    /// The member's node; a missing key is Foundation's error to report.
    private func value(_ key: Key) throws -> Int {
        guard let index = try reader.member(key.stringValue, of: object) else { throw reader.giveUp() }
        return index
    }

    func decodeNil(forKey key: Key) throws -> Bool { reader.isNull(try value(key)) }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try reader.bool(at: value(key)) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try reader.string(at: value(key)) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try reader.double(at: value(key)) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { throw reader.giveUp() }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try reader.integer(type, at: value(key)) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try reader.integer(type, at: value(key)) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try reader.integer(type, at: value(key)) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try reader.integer(type, at: value(key)) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try reader.integer(type, at: value(key)) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try reader.integer(type, at: value(key)) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try reader.integer(type, at: value(key)) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try reader.integer(type, at: value(key)) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try reader.integer(type, at: value(key)) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try reader.integer(type, at: value(key)) }
    func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { throw reader.giveUp() }
    func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { throw reader.giveUp() }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try reader.decode(type, at: value(key))
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try JSONValueDecoder(reader: reader, node: value(key)).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try JSONValueDecoder(reader: reader, node: value(key)).unkeyedContainer()
    }

    /// Foundation's `super` conventions are its own to apply.
    func superDecoder() throws -> any Decoder { throw reader.giveUp() }
    func superDecoder(forKey key: Key) throws -> any Decoder { throw reader.giveUp() }
}
