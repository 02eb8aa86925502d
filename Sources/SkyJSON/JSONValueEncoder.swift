/// The `Encoder` that `JSONByteWriter` hands each value: which value it is, and where it sits.
struct JSONValueEncoder: Encoder {
    let writer: JSONByteWriter
    /// The value's number in the writer (see `JSONByteWriter.container(of:isObject:)`).
    let value: Int
    let pathCount: Int

    var codingPath: [any CodingKey] { writer.codingPath(pathCount) }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let frame = writer.container(of: value, isObject: true)
        return KeyedEncodingContainer(JSONObjectContainer<Key>(writer: writer, frame: frame, pathCount: pathCount))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let frame = writer.container(of: value, isObject: false)
        return JSONArrayContainer(writer: writer, frame: frame, pathCount: pathCount)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        JSONSingleValueContainer(writer: writer, value: value, pathCount: pathCount)
    }
}

/// A value's single-value container: one scalar or one nested value into the value's slot.
struct JSONSingleValueContainer: SingleValueEncodingContainer, JSONIntegerEncoding {
    let writer: JSONByteWriter
    let value: Int
    let pathCount: Int

    var codingPath: [any CodingKey] { writer.codingPath(pathCount) }

    mutating func encodeNil() throws {
        try writer.claim(value)
        writer.appendNull()
    }

    mutating func encode(_ value: Bool) throws {
        try writer.claim(self.value)
        writer.appendBool(value)
    }

    mutating func encode(_ value: String) throws {
        try writer.claim(self.value)
        writer.appendString(value)
    }

    mutating func encode(_ value: Double) throws {
        try writer.claim(self.value)
        try writer.appendDouble(value)
    }

    mutating func encode(_ value: Float) throws {
        try writer.claim(self.value)
        try writer.appendFloat(value)
    }

    mutating func encode(_ value: Int128) throws { throw writer.giveUp() }
    mutating func encode(_ value: UInt128) throws { throw writer.giveUp() }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try writer.writeSingleValue(value, owner: self.value, pathCount: pathCount)
    }

    func integer(_ value: some FixedWidthInteger) throws {
        try writer.claim(self.value)
        writer.appendInteger(value)
    }
}
