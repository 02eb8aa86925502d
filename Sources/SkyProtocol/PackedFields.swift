/// Reads the fields of a packed header (the first frame of a version 2 message, `SKYC02` or
/// `SKYW02`: docs/protocol.md, "Packed messages") in order. Every read checks what is left, so
/// a short or long header is a ``ProtocolError``, never a trap.
struct PackedFields {
    /// The header after the signature and the command byte; read from ``offset`` on.
    private let fields: ArraySlice<UInt8>
    /// How many of its bytes the reads so far took. An offset, not a shrinking slice: each
    /// new slice counted the buffer's reference up and down, several fields a message.
    private var offset = 0
    /// The command the fields belong to, for errors.
    private let command: String

    /// The fields after the signature and the command byte.
    init(_ fields: ArraySlice<UInt8>, command: String) {
        self.fields = fields
        self.command = command
    }

    // The fixed-size reads inlined: called, each field cost a call more than its read.
    @inline(__always) mutating func requestID() throws(ProtocolError) -> RequestID {
        let at = try take(RequestID.byteCount, "request id")
        return fields.withUnsafeBytes { raw in
            RequestID(
                high: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt64.self)),
                low: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self)))
        }
    }

    @inline(__always) mutating func uint32(_ name: String) throws(ProtocolError) -> UInt32 {
        let at = try take(4, name)
        return fields.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
    }

    @inline(__always) mutating func statusByte() throws(ProtocolError) -> UInt8 {
        try byte("status")
    }

    /// A delivery tag after its one-byte length.
    mutating func lengthPrefixedTag() throws(ProtocolError) -> DeliveryTag {
        let length = Int(try byte("tag length"))
        let at = try take(length, "delivery tag")
        return try WireFormat.deliveryTag(fields[(fields.startIndex + at)..<(fields.startIndex + at + length)])
    }

    /// What is left, as a service name (the last field of a REQUEST header), through `names`.
    mutating func remainingName(_ names: inout NameCache) throws(ProtocolError) -> String {
        defer { offset = fields.count }
        return try names.name(fields[(fields.startIndex + offset)...])
    }

    /// What is left, as a delivery tag (the last field of a worker REPLY header).
    mutating func remainingTag() throws(ProtocolError) -> DeliveryTag {
        defer { offset = fields.count }
        return try WireFormat.deliveryTag(fields[(fields.startIndex + offset)...])
    }

    /// Nothing may be left.
    func end() throws(ProtocolError) {
        guard offset == fields.count else {
            throw .invalidValue(
                name: "\(command) header", reason: "\(fields.count - offset) bytes after its last field")
        }
    }

    @inline(__always) private mutating func byte(_ name: String) throws(ProtocolError) -> UInt8 {
        let at = try take(1, name)
        return fields[fields.startIndex + at]
    }

    /// Moves past the next `count` bytes, checked to be there; returns where they start.
    /// Inlined: a call each field cost more than the check.
    @inline(__always) private mutating func take(_ count: Int, _ name: String) throws(ProtocolError) -> Int {
        let left = fields.count - offset
        guard left >= count else {
            throw .invalidValue(
                name: "\(command) header", reason: "ends inside its \(name) (\(left) of \(count) bytes left)")
        }
        defer { offset += count }
        return offset
    }
}
