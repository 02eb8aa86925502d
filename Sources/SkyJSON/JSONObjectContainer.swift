/// A keyed container of `JSONByteWriter`: each call writes `"key":value,` into its open object.
struct JSONObjectContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: JSONByteWriter
    /// The object's frame; -1 if the writer gave up when it was asked for.
    let frame: Int
    let pathCount: Int

    var codingPath: [any CodingKey] { writer.codingPath(pathCount) }

    mutating func encodeNil(forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        writer.appendNull()
        writer.endEntry()
    }

    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        writer.appendBool(value)
        writer.endEntry()
    }

    mutating func encode(_ value: String, forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        writer.appendString(value)
        writer.endEntry()
    }

    mutating func encode(_ value: Double, forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        try writer.appendDouble(value)
        writer.endEntry()
    }

    mutating func encode(_ value: Float, forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        try writer.appendFloat(value)
        writer.endEntry()
    }

    mutating func encode(_ value: Int, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int128, forKey key: Key) throws { throw writer.giveUp() }
    mutating func encode(_ value: UInt128, forKey key: Key) throws { throw writer.giveUp() }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        try writer.writeValue(value, key: key)
        writer.endEntry()
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        let nested = writer.nested(in: frame, key: key, isObject: true, asMember: true)
        return KeyedEncodingContainer(
            JSONObjectContainer<NestedKey>(writer: writer, frame: nested, pathCount: pathCount + 1))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = writer.nested(in: frame, key: key, isObject: false, asMember: true)
        return JSONArrayContainer(writer: writer, frame: nested, pathCount: pathCount + 1)
    }

    /// Written later than its place in the object, so left to Foundation.
    mutating func superEncoder() -> any Encoder {
        _ = writer.giveUp()
        return JSONValueEncoder(writer: writer, value: -1, pathCount: pathCount)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        superEncoder()
    }

    private func integer(_ value: some FixedWidthInteger, _ key: Key) throws {
        try writer.beginMember(in: frame, key: key.stringValue)
        writer.appendInteger(value)
        writer.endEntry()
    }
}
