/// A delivery's tag: 1...255 opaque bytes the broker puts in a worker's REQUEST and the worker
/// returns unchanged in its REPLY (docs/protocol.md). Sky's broker writes its delivery number as
/// 8 big-endian bytes; up to 16 bytes are kept without an array.
public struct DeliveryTag: Hashable, Sendable, ExpressibleByArrayLiteral, CustomStringConvertible {
    public let bytes: InlineBytes

    public init(_ bytes: [UInt8]) {
        self.bytes = InlineBytes(bytes)
    }

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = InlineBytes(bytes)
    }

    public init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = InlineBytes(bytes)
    }

    package init(_ bytes: InlineBytes) {
        self.bytes = bytes
    }

    public init(arrayLiteral bytes: UInt8...) {
        self.init(bytes)
    }

    /// The tag Sky's broker writes for delivery number `number`.
    public init(number: UInt64) {
        self = withUnsafeBytes(of: number.bigEndian) { DeliveryTag($0) }
    }

    /// The delivery number of a tag Sky's broker wrote; nil for any other tag.
    public var number: UInt64? {
        guard bytes.count == 8 else { return nil }
        return bytes.withBytes { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
    }

    public var count: Int { bytes.count }

    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withBytes(body)
    }

    public var description: String { Hex.encode(bytes.array) }
}
