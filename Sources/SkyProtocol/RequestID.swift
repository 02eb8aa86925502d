import SkyWire

/// A 16-byte request identifier, unique per `scan` call. Retries of a call reuse it, so a reply
/// can always be matched to the call that is waiting for it, and a duplicate can be recognised.
public struct RequestID: Hashable, Sendable, CustomStringConvertible {
    public let high: UInt64
    public let low: UInt64

    public static let byteCount = 16

    /// The id's bits mixed under `seed`, for a table's bucket: the low half mixed with the seed,
    /// then the high half mixed in. A peer that does not know the seed cannot choose ids that
    /// share buckets (with `high ^ low`, any two ids of equal XOR would), and it costs a few
    /// multiplications where the standard library's seeded `Hasher` cost about ten times the
    /// instructions.
    @inlinable
    public func mixed(with seed: UInt64) -> UInt64 {
        SplitMix64.mix(SplitMix64.mix(low ^ seed) ^ high)
    }

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A random ID (122 random bits would do; all 128 are random here).
    public static func random() -> RequestID {
        var generator = SystemRandomNumberGenerator()
        return RequestID(high: generator.next(), low: generator.next())
    }

    /// Decodes the 16-byte frame form.
    public init(frame: [UInt8]) throws(ProtocolError) {
        try self.init(frame: frame[...])
    }

    /// Decodes the 16-byte frame form from a view of a message.
    public init(frame: ArraySlice<UInt8>) throws(ProtocolError) {
        guard frame.count == Self.byteCount else {
            throw .invalidRequestID(length: frame.count)
        }
        let (high, low) = frame.withUnsafeBytes { raw in
            (
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
            )
        }
        self.init(high: high, low: low)
    }

    /// The 16-byte frame form, big-endian.
    public var frame: [UInt8] {
        ByteArray.written(capacity: Self.byteCount) { raw in
            raw.storeBytes(of: high.bigEndian, toByteOffset: 0, as: UInt64.self)
            raw.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
            return Self.byteCount
        }
    }

    /// 32 lowercase hex digits.
    public var description: String { Hex.encode(frame) }
}

/// Lowercase hex, for routing ids and request ids in logs and events.
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
