/// The last service name a process decoded from the wire, kept beside its bytes: a broker or a
/// worker reads the same few names on every request, and comparing a name's bytes with the
/// last one's costs a fraction of checking them and making a `String` of them again.
///
/// Only a name decoded (and so checked) before is reused: bytes that differ are decoded as
/// ever and become the one kept. Owned by one decoding loop (a state machine's), not shared.
package struct NameCache: Sendable {
    private var bytes: [UInt8] = []
    private var name = ""

    package init() {}

    /// The name `frame` holds; throws as ``WireFormat/name(_:)-(ArraySlice<UInt8>)`` for an
    /// invalid one.
    mutating func name(_ frame: ArraySlice<UInt8>) throws(ProtocolError) -> String {
        if frame.count == bytes.count, !bytes.isEmpty,
            frame.withUnsafeBytes({ given in bytes.withUnsafeBytes { WireFormat.sameBytes(given, $0) } })
        {
            return name
        }
        let decoded = try WireFormat.name(frame)
        bytes = Array(frame)
        name = decoded
        return decoded
    }
}
