import SkyWire

/// The protocol's frames on ``Frames``, which lies below this module (in SkyWire, beside the
/// transport) and so knows no request id.
extension Frames.Writer {
    /// A request id's 16-byte frame.
    @inlinable
    public mutating func append(_ id: RequestID) {
        append(bigEndian: id.high, id.low)
    }

    /// Appends a packed header (docs/protocol.md, "Packed messages") as one frame, in one
    /// append: the version 2 signature, the command byte and the request id, then what `fields`
    /// writes, at most `fieldBytes` bytes.
    @inlinable
    public mutating func appendPacked(
        _ signature: [UInt8], command: UInt8, _ id: RequestID, fieldBytes: Int,
        _ fields: (inout PackedFieldWriter) -> Void
    ) {
        appendWritten(capacity: signature.count + 1 + RequestID.byteCount + fieldBytes) { writer in
            writer.packedStart(signature, command: command, id)
            fields(&writer)
        }
    }
}

extension PackedFieldWriter {
    /// What every packed header starts with: the version 2 signature, the command byte and the
    /// request id (docs/protocol.md, "Packed messages").
    @inlinable
    public mutating func packedStart(_ signature: [UInt8], command: UInt8, _ id: RequestID) {
        bytes(signature)
        byte(command)
        bigEndian(id.high)
        bigEndian(id.low)
    }
}

extension FrameParts {
    /// Lends a packed message (docs/protocol.md, "Packed messages") to `use` from its parts: a
    /// head of the version 2 signature, the command byte and the request id, then what `fields`
    /// writes, exactly `fieldBytes` bytes; then `body` and `trailer`. The head is the one
    /// ``Frames/Writer/appendPacked(_:command:_:fieldBytes:_:)`` writes.
    @inlinable
    public static func lendPacked<Result>(
        _ signature: [UInt8], command: UInt8, _ id: RequestID, fieldBytes: Int,
        routedTo routingID: UnsafeRawBufferPointer?, body: ArraySlice<UInt8>, trailer: [UInt8]?,
        fields: (inout PackedFieldWriter) -> Void, to use: (FrameParts) -> Result
    ) -> Result {
        lend(
            routedTo: routingID, headBytes: signature.count + 1 + RequestID.byteCount + fieldBytes, body: body,
            trailer: trailer,
            head: { writer in
                writer.packedStart(signature, command: command, id)
                fields(&writer)
            }, to: use)
    }
}
