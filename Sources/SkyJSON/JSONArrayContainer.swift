/// An unkeyed container of `JSONByteWriter`: each call writes `value,` into its open array.
struct JSONArrayContainer: UnkeyedEncodingContainer, JSONIntegerEncoding {
    /// An element's place in the coding path.
    struct Index: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }

        init(_ index: Int) { intValue = index }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    let writer: JSONByteWriter
    /// The array's frame; -1 if the writer gave up when it was asked for.
    let frame: Int
    let pathCount: Int
    private(set) var count = 0

    init(writer: JSONByteWriter, frame: Int, pathCount: Int) {
        self.writer = writer
        self.frame = frame
        self.pathCount = pathCount
    }

    var codingPath: [any CodingKey] { writer.codingPath(pathCount) }

    mutating func encodeNil() throws {
        try writer.enter(frame)
        writer.appendNull()
        end()
    }

    mutating func encode(_ value: Bool) throws {
        try writer.enter(frame)
        writer.appendBool(value)
        end()
    }

    mutating func encode(_ value: String) throws {
        try writer.enter(frame)
        writer.appendString(value)
        end()
    }

    mutating func encode(_ value: Double) throws {
        try writer.enter(frame)
        try writer.appendDouble(value)
        end()
    }

    mutating func encode(_ value: Float) throws {
        try writer.enter(frame)
        try writer.appendFloat(value)
        end()
    }

    mutating func encode(_ value: Int128) throws { throw writer.giveUp() }
    mutating func encode(_ value: UInt128) throws { throw writer.giveUp() }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try writer.enter(frame)
        try writer.writeValue(value, key: Index(count))
        end()
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<
        NestedKey
    > {
        let nested = writer.nested(in: frame, key: Index(count), isObject: true, asMember: false)
        count += 1
        return KeyedEncodingContainer(
            JSONObjectContainer<NestedKey>(writer: writer, frame: nested, pathCount: pathCount + 1))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = writer.nested(in: frame, key: Index(count), isObject: false, asMember: false)
        count += 1
        return JSONArrayContainer(writer: writer, frame: nested, pathCount: pathCount + 1)
    }

    /// Written later than its place in the array, so left to Foundation.
    mutating func superEncoder() -> any Encoder {
        _ = writer.giveUp()
        return JSONValueEncoder(writer: writer, value: -1, pathCount: pathCount)
    }

    mutating func integer(_ value: some FixedWidthInteger) throws {
        try writer.enter(frame)
        writer.appendInteger(value)
        end()
    }

    private mutating func end() {
        writer.endEntry()
        count += 1
    }
}
