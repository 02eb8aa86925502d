/// A 16-byte request identifier, unique per `scan` call. Retries of a call reuse it, so a reply
/// can always be matched to the call that is waiting for it, and a duplicate can be recognised.
public struct RequestID: Hashable, Sendable, CustomStringConvertible {
    public let high: UInt64
    public let low: UInt64

    public static let byteCount = 16

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
        guard frame.count == Self.byteCount else {
            throw .invalidRequestID(length: frame.count)
        }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in 0..<8 { high = high << 8 | UInt64(frame[index]) }
        for index in 8..<16 { low = low << 8 | UInt64(frame[index]) }
        self.init(high: high, low: low)
    }

    /// The 16-byte frame form, big-endian.
    public var frame: [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Self.byteCount)
        for index in 0..<8 {
            bytes[index] = UInt8(truncatingIfNeeded: high >> UInt64(56 - index * 8))
            bytes[8 + index] = UInt8(truncatingIfNeeded: low >> UInt64(56 - index * 8))
        }
        return bytes
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
