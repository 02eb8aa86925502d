/// The name of a durable job: 16 bytes the broker makes when it records the job, printed as 26
/// characters of Crockford base32 (the ULID text form: the first 48 bits are the submit time in
/// milliseconds, so ids sort by submission).
public struct JobID: Hashable, Sendable, CustomStringConvertible, LosslessStringConvertible {
    /// The 16 bytes as two words, big-endian: hashed and compared as two integers (the broker
    /// looks jobs up by id several times per job).
    private let high: UInt64
    private let low: UInt64

    /// The 16 bytes, as they travel and as the journal keys them.
    public var bytes: [UInt8] { RequestID(high: high, low: low).frame }

    private init(words bytes: [UInt8]) {
        high = bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
        low = bytes[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
    }

    public static let byteCount = 16
    public static let textLength = 26
    private static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)

    /// - Returns: `nil` unless `bytes` has exactly 16 bytes.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.init(words: bytes)
    }

    /// A new id: `milliseconds` (since 1970) in the first 48 bits, then 80 bits of `random`.
    public init(milliseconds: Int64, random: inout some RandomNumberGenerator) {
        var bytes = [UInt8](repeating: 0, count: Self.byteCount)
        let time = UInt64(max(0, milliseconds)) & 0xFFFF_FFFF_FFFF
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: time >> UInt64(40 - index * 8)) }
        let high: UInt64 = random.next()
        let low: UInt64 = random.next()
        for index in 0..<2 { bytes[6 + index] = UInt8(truncatingIfNeeded: high >> UInt64(8 - index * 8)) }
        for index in 0..<8 { bytes[8 + index] = UInt8(truncatingIfNeeded: low >> UInt64(56 - index * 8)) }
        self.init(words: bytes)
    }

    /// Parses the 26-character form (case-insensitive; `I`/`L` read as 1 and `O` as 0, as
    /// Crockford's alphabet allows). `nil` for anything else.
    public init?(_ text: String) {
        let characters = Array(text.utf8)
        guard characters.count == Self.textLength else { return nil }
        var value: (high: UInt64, low: UInt64) = (0, 0)
        for (index, character) in characters.enumerated() {
            guard let digit = Self.digit(character) else { return nil }
            // The first character carries only 3 bits (26 × 5 = 130 = 128 + 2).
            if index == 0 && digit > 7 { return nil }
            value.high = value.high << 5 | value.low >> 59
            value.low = value.low << 5 | UInt64(digit)
        }
        high = value.high
        low = value.low
    }

    private static func digit(_ character: UInt8) -> UInt8? {
        let upper = character >= UInt8(ascii: "a") && character <= UInt8(ascii: "z") ? character - 32 : character
        switch upper {
        case UInt8(ascii: "I"), UInt8(ascii: "L"): return 1
        case UInt8(ascii: "O"): return 0
        default: return alphabet.firstIndex(of: upper).map(UInt8.init)
        }
    }

    /// The submit time the id carries, in milliseconds since 1970.
    public var milliseconds: Int64 { Int64(high >> 16) }

    public var description: String {
        var high = self.high
        var low = self.low
        var text = [UInt8](repeating: 0, count: Self.textLength)
        for index in stride(from: Self.textLength - 1, through: 0, by: -1) {
            text[index] = Self.alphabet[Int(low & 31)]
            low = low >> 5 | high << 59
            high >>= 5
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The id as a request id (same 16 bytes): a job runs at a worker under its id.
    public var requestID: RequestID { RequestID(high: high, low: low) }

    /// The job a request of this id delivers.
    public init(_ requestID: RequestID) {
        high = requestID.high
        low = requestID.low
    }
}
