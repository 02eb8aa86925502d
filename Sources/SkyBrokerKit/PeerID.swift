import SkyProtocol

/// A peer's ZeroMQ routing id at one of the broker's ROUTER sockets.
///
/// Ids of up to 16 bytes (libzmq generates 5-byte ones) are stored inline, without a heap
/// allocation: the broker keeps one per waiting request, so this is most of a request's overhead.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    private enum Storage: Hashable, Sendable {
        case inline(UInt64, UInt64, count: UInt8)
        case heap([UInt8])
    }

    private let storage: Storage

    public init(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    /// A routing id read from a view of a received message.
    public init(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count <= 16 else {
            storage = .heap(Array(bytes))
            return
        }
        var words: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        storage = .inline(words.0, words.1, count: UInt8(bytes.count))
    }

    /// The routing id as sent on the wire.
    public var bytes: [UInt8] {
        switch storage {
        case .heap(let bytes):
            return bytes
        case .inline(let first, let second, let count):
            var words = (first, second)
            return withUnsafeBytes(of: &words) { Array($0.prefix(Int(count))) }
        }
    }

    public static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        switch (lhs.storage, rhs.storage) {
        case (.inline(let a, let b, let count), .inline(let c, let d, let other)): a == c && b == d && count == other
        case (.heap(let a), .heap(let b)): a == b
        default: false
        }
    }

    /// Two words for an inline id, its length folded into the second: ids that share a hash
    /// this way differ in length, at most 17 of them, and the seeded hash spreads the rest
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

    public var description: String { Hex.encode(bytes) }
}
