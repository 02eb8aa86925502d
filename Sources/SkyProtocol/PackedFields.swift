/// Reads the fields of a packed header (the first frame of a version 2 message, `SKYC02` or
/// `SKYW02`: docs/protocol.md, "Packed messages") in order. Every read checks what is left, so
/// a short or long header is a ``ProtocolError``, never a trap.
struct PackedFields {
    private var rest: ArraySlice<UInt8>
    /// The command the fields belong to, for errors.
    private let command: String

    /// The fields after the signature and the command byte.
    init(_ fields: ArraySlice<UInt8>, command: String) {
        rest = fields
        self.command = command
    }

    mutating func requestID() throws(ProtocolError) -> RequestID {
        try RequestID(frame: take(RequestID.byteCount, "request id"))
    }

    mutating func uint32(_ name: String) throws(ProtocolError) -> UInt32 {
        try WireFormat.uint32(take(4, name), name: name)
    }

    mutating func statusByte() throws(ProtocolError) -> UInt8 {
        try ReplyStatus.byte(of: take(1, "status"))
    }

    /// A delivery tag after its one-byte length.
    mutating func lengthPrefixedTag() throws(ProtocolError) -> DeliveryTag {
        let length = Int(try take(1, "tag length").first ?? 0)
        return try WireFormat.deliveryTag(take(length, "delivery tag"))
    }

    /// What is left, as a service name (the last field of a REQUEST header).
    mutating func remainingName() throws(ProtocolError) -> String {
        defer { rest = rest[rest.endIndex...] }
        return try WireFormat.name(rest)
    }

    /// What is left, as a delivery tag (the last field of a worker REPLY header).
    mutating func remainingTag() throws(ProtocolError) -> DeliveryTag {
        defer { rest = rest[rest.endIndex...] }
        return try WireFormat.deliveryTag(rest)
    }

    /// Nothing may be left.
    func end() throws(ProtocolError) {
        guard rest.isEmpty else {
            throw .invalidValue(name: "\(command) header", reason: "\(rest.count) bytes after its last field")
        }
    }

    private mutating func take(_ count: Int, _ name: String) throws(ProtocolError) -> ArraySlice<UInt8> {
        guard rest.count >= count else {
            throw .invalidValue(
                name: "\(command) header", reason: "ends inside its \(name) (\(rest.count) of \(count) bytes left)")
        }
        // Indices, not `prefix`/`dropFirst`: their generic paths are slow, and the broker reads
        // several fields a task.
        let end = rest.startIndex + count
        defer { rest = rest[end...] }
        return rest[rest.startIndex..<end]
    }
}
