/// An unkeyed container of `JSONByteReader`: each call reads the next element.
struct JSONArrayDecodingContainer: UnkeyedDecodingContainer {
    let reader: JSONByteReader
    let array: Int
    /// The node of the next element.
    private var cursor: Int
    private(set) var currentIndex = 0

    init(reader: JSONByteReader, array: Int) {
        self.reader = reader
        self.array = array
        cursor = array + 1
    }

    var codingPath: [any CodingKey] { reader.codingPath(to: array) }
    var count: Int? { reader.nodes[array].start }
    var isAtEnd: Bool { cursor >= reader.nodes[array].next }

    /// The next element's node, and the cursor past it; reading past the end is Foundation's
    /// error to report.
    private mutating func advance() throws -> Int {
        guard !isAtEnd else { throw reader.giveUp() }
        let element = cursor
        cursor = reader.nodes[element].next
        currentIndex += 1
        return element
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else { throw reader.giveUp() }
        guard reader.isNull(cursor) else { return false }
        _ = try advance()
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try reader.bool(at: advance()) }
    mutating func decode(_ type: String.Type) throws -> String { try reader.string(at: advance()) }
    mutating func decode(_ type: Double.Type) throws -> Double { try reader.double(at: advance()) }
    mutating func decode(_ type: Float.Type) throws -> Float { throw reader.giveUp() }
    mutating func decode(_ type: Int.Type) throws -> Int { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try reader.integer(type, at: advance()) }
    mutating func decode(_ type: Int128.Type) throws -> Int128 { throw reader.giveUp() }
    mutating func decode(_ type: UInt128.Type) throws -> UInt128 { throw reader.giveUp() }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try reader.decode(type, at: advance())
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try JSONValueDecoder(reader: reader, node: advance()).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try JSONValueDecoder(reader: reader, node: advance()).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { throw reader.giveUp() }
}
