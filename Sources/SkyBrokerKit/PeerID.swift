import SkyProtocol

/// A peer's ZeroMQ routing id at one of the broker's ROUTER sockets.
///
/// Ids of up to 15 bytes (libzmq generates 5-byte ones) are stored inline, without a heap
/// allocation: the broker keeps one per waiting request, so this is most of a request's overhead.
/// The length sits in the last byte, so two words hold the whole id: equality is two
/// comparisons and the hash two words, and ids that differ only in length or zero padding stay
/// different keys.
public struct PeerID: Hashable, Sendable, CustomStringConvertible {
    private enum Storage: Hashable, Sendable {
        /// The bytes, then zeros, with the length in the top byte of the second word.
        case inline(UInt64, UInt64)
        case heap([UInt8])
    }

    private let storage: Storage

    /// Longest id kept inline: 16 bytes less the one that holds the length.
    static let inlineLimit = 15

    public init(_ bytes: [UInt8]) {
        self.init(bytes[...])
    }

    /// A routing id read from a view of a received message.
    public init(_ bytes: ArraySlice<UInt8>) {
        guard bytes.count <= Self.inlineLimit else {
            storage = .heap(Array(bytes))
            return
        }
        var words: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &words) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
            raw[15] = UInt8(bytes.count)
        }
        storage = .inline(words.0, words.1)
    }

    /// The routing id as sent on the wire.
    public var bytes: [UInt8] {
        switch storage {
        case .heap(let bytes):
            return bytes
        case .inline(let first, let second):
            var words = (first, second)
            return withUnsafeBytes(of: &words) { Array($0.prefix(Int($0[15]))) }
        }
    }

    public static func == (lhs: PeerID, rhs: PeerID) -> Bool {
        switch (lhs.storage, rhs.storage) {
        case (.inline(let a, let b), .inline(let c, let d)): a == c && b == d
        case (.heap(let a), .heap(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch storage {
        case .inline(let first, let second):
            hasher.combine(first)
            hasher.combine(second)
        case .heap(let bytes):
            hasher.combine(bytes)
        }
    }

    public var description: String { Hex.encode(bytes) }
}
