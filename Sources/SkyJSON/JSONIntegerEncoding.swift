/// The integer overloads that `JSONByteWriter`'s unkeyed and single-value containers must each
/// provide, written once: every width goes through `integer(_:)`. (Their 128-bit overloads,
/// which give up, stay in the types: the standard library has defaults for those that a
/// second protocol's would make ambiguous.)
protocol JSONIntegerEncoding {
    mutating func integer(_ value: some FixedWidthInteger) throws
}

extension JSONIntegerEncoding {
    mutating func encode(_ value: Int) throws { try integer(value) }
    mutating func encode(_ value: Int8) throws { try integer(value) }
    mutating func encode(_ value: Int16) throws { try integer(value) }
    mutating func encode(_ value: Int32) throws { try integer(value) }
    mutating func encode(_ value: Int64) throws { try integer(value) }
    mutating func encode(_ value: UInt) throws { try integer(value) }
    mutating func encode(_ value: UInt8) throws { try integer(value) }
    mutating func encode(_ value: UInt16) throws { try integer(value) }
    mutating func encode(_ value: UInt32) throws { try integer(value) }
    mutating func encode(_ value: UInt64) throws { try integer(value) }
}
