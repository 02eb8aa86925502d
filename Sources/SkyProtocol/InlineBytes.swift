/// Up to 16 bytes kept in two words instead of an array; longer values in an array.
///
/// Routing ids (libzmq generates 5-byte ones) and delivery tags (Sky's broker writes 8 bytes)
/// are kept once per request and read or written once per message: an array of each was a heap
/// allocation apiece.
public struct InlineBytes: Hashable, Sendable {
    @usableFromInline enum Storage: Hashable, Sendable {
        case inline(UInt64, UInt64, count: UInt8)
        case heap([UInt8])
    }

    @usableFromInline let storage: Storage

    // Concrete initializers, no generic one: called from other modules, a generic one ran
    // unspecialised (a metadata lookup per byte), which doubled the broker's cost of a task.

    public init(_ bytes: [UInt8]) {
        self = bytes.withUnsafeBytes { InlineBytes($0) }
    }

    public init(_ bytes: ArraySlice<UInt8>) {
        self = bytes.withUnsafeBytes { InlineBytes($0) }
    }

    /// Inlinable, and read a word at a time: a routing id is made from every message a broker
    /// reads, and a cross-module call that copied the bytes into the words (a `memcpy` for five
    /// bytes) cost about 50 instructions each.
    @inlinable public init(_ bytes: UnsafeRawBufferPointer) {
        let count = bytes.count
        guard count <= 16 else {
            storage = .heap(Array(bytes))
            return
        }
        let first: UInt64
        var second: UInt64 = 0
        if count >= 8 {
            first = bytes.loadUnaligned(as: UInt64.self)
            if count > 8 { second = Self.word(bytes, from: 8, count: count - 8) }
        } else {
            first = Self.word(bytes, from: 0, count: count)
        }
        storage = .inline(first, second, count: UInt8(count))
    }

    /// The two words and length of a value of up to 16 bytes; nil for a longer one. For tables
    /// that keep keys as plain words (`RunningTasks`): an `InlineBytes` is copied and compared
    /// through its enum's outlined value witnesses.
    @inlinable package var inlineWords: (first: UInt64, second: UInt64, count: UInt8)? {
        if case .inline(let first, let second, let count) = storage { return (first, second, count) }
        return nil
    }

    /// The value ``inlineWords`` gave.
    @inlinable package init(inlineWords first: UInt64, _ second: UInt64, count: UInt8) {
        storage = .inline(first, second, count: count)
    }

    /// Up to 8 bytes from `offset` as a word whose memory holds them in order, zeros after (as
    /// copying them into a zeroed word would leave it).
    @inlinable @inline(__always)
    static func word(_ bytes: UnsafeRawBufferPointer, from offset: Int, count: Int) -> UInt64 {
        if count == 8 { return bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) }
        // Built as a little-endian number (byte i at bits 8i), then stored in that order.
        var value: UInt64 = 0
        var at = offset
        var shift: UInt64 = 0
        if count & 4 != 0 {
            value = UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
            at += 4
            shift = 32
        }
        if count & 2 != 0 {
            value |= UInt64(UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt16.self))) << shift
            at += 2
            shift += 16
        }
        if count & 1 != 0 { value |= UInt64(bytes[at]) << shift }
        return UInt64(littleEndian: value)
    }

    public var count: Int {
        switch storage {
        case .inline(_, _, let count): Int(count)
        case .heap(let bytes): bytes.count
        }
    }

    /// The bytes as an array (made anew for an inline value).
    public var array: [UInt8] {
        withBytes { Array($0) }
    }

    /// Lends the bytes without making an array of them. Inlinable: called across modules for
    /// every message the broker sends, it ran unspecialised (the generic `withUnsafeBytes(of:)`
    /// and `prefix` under it too).
    @inlinable public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch storage {
        case .heap(let bytes):
            return try bytes.withUnsafeBytes(body)
        case .inline(let first, let second, let count):
            var words = (first, second)
            // `prefix`, not `UnsafeRawBufferPointer(start:count:)`: with that, Swift 6.3.1's
            // optimiser made a load in `body` read the words wrong (docs/performance-history.md,
            // "copies made in place").
            return try withUnsafeBytes(of: &words) { try body(UnsafeRawBufferPointer(rebasing: $0.prefix(Int(count)))) }
        }
    }

    public static func == (lhs: InlineBytes, rhs: InlineBytes) -> Bool {
        switch (lhs.storage, rhs.storage) {
        case (.inline(let a, let b, let count), .inline(let c, let d, let other)): a == c && b == d && count == other
        case (.heap(let a), .heap(let b)): a == b
        default: false
        }
    }

    /// Two words for an inline value, its length folded into the second: values that share a
    /// hash this way differ in length, at most 17 of them, and the seeded hash spreads the rest
    /// (the synthesised hash combined a case tag and three fields: 4 combines a lookup).
    public func hash(into hasher: inout Hasher) {
        switch storage {
        case .inline(let first, let second, let count):
            hasher.combine(first)
            hasher.combine(second &+ UInt64(count))
        case .heap(let bytes):
            hasher.combine(bytes)
        }
    }
}
