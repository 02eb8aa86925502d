import Foundation

/// Reads JSON bytes into `Decodable` values: one pass over the bytes into a flat list of nodes,
/// then each container reads its members from that list.
///
/// Foundation's `JSONDecoder` took about half of what the typed `scan` path added to a raw call
/// in the client, most of it unspecialised generic code.
/// This reader takes what it can decode exactly as Foundation would: well-formed JSON, each key
/// once, integers written as integers, finite numbers in the forms Foundation reads. Anything
/// else (a missing key, a type mismatch, `Float`, `Data`, `URL`, `Decimal`, `superDecoder`,
/// malformed text) makes it give up, and `CanonicalJSON` decodes the bytes with Foundation's
/// decoder, so the values and the errors are Foundation's in every case.
final class JSONByteReader {
    /// Thrown (and remembered, in case user code catches it) when the bytes need Foundation.
    struct GiveUp: Error {}

    /// A value in the document.
    struct Node {
        enum Kind: UInt8 {
            case object, array, string, escapedString, integer, number, `true`, `false`, null
        }
        var kind: Kind
        /// Strings: the first byte after the quote; numbers: the first byte; containers: how
        /// many members or elements.
        var start: Int
        /// Strings: where the closing quote is; numbers: the byte after the last.
        var end: Int
        /// The node after this one and everything inside it.
        var next: Int
    }

    /// Deeper documents are left to Foundation (and its limit).
    static let depthLimit = 256
    /// Objects with more members look keys up through a dictionary instead of a scan.
    static let scanLimit = 16

    let bytes: [UInt8]
    // A reader lives for one `decode` call on one thread, and no access to its state overlaps
    // another: the runtime's exclusivity checks are off, as in `JSONByteWriter`.
    @exclusivity(unchecked) private(set) var nodes: [Node] = []
    @exclusivity(unchecked) private var keyIndexes: [Int: [String: Int]] = [:]
    @exclusivity(unchecked) private var gaveUp = false

    /// `type` decoded from `bytes`, or nil when it needs Foundation's decoder.
    static func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value? {
        let reader = JSONByteReader(bytes: bytes)
        let value: Value
        do {
            var parser = JSONParser(bytes: bytes)
            reader.nodes = try parser.document()
            value = try reader.decode(type, at: 0)
        } catch {
            if error is GiveUp || reader.gaveUp { return nil }
            throw error
        }
        return reader.gaveUp ? nil : value
    }

    private init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Marks the decoding as one for Foundation, and returns the error to throw.
    func giveUp() -> GiveUp {
        gaveUp = true
        return GiveUp()
    }

    // MARK: Values

    /// The value of node `index` as `type`.
    func decode<Value: Decodable>(_ type: Value.Type, at index: Int) throws -> Value {
        if type == String.self { return unsafeBitCast(try string(at: index), to: Value.self) }
        if type == Int.self { return unsafeBitCast(try integer(Int.self, at: index), to: Value.self) }
        if type == Double.self { return unsafeBitCast(try double(at: index), to: Value.self) }
        if type == Bool.self { return unsafeBitCast(try bool(at: index), to: Value.self) }
        if type == Int64.self { return unsafeBitCast(try integer(Int64.self, at: index), to: Value.self) }
        if type == UInt64.self { return unsafeBitCast(try integer(UInt64.self, at: index), to: Value.self) }
        if type == Int32.self { return unsafeBitCast(try integer(Int32.self, at: index), to: Value.self) }
        if type == UInt32.self { return unsafeBitCast(try integer(UInt32.self, at: index), to: Value.self) }
        if type == UInt.self { return unsafeBitCast(try integer(UInt.self, at: index), to: Value.self) }
        if type == Int16.self { return unsafeBitCast(try integer(Int16.self, at: index), to: Value.self) }
        if type == UInt16.self { return unsafeBitCast(try integer(UInt16.self, at: index), to: Value.self) }
        if type == Int8.self { return unsafeBitCast(try integer(Int8.self, at: index), to: Value.self) }
        if type == UInt8.self { return unsafeBitCast(try integer(UInt8.self, at: index), to: Value.self) }
        if type == Float.self || type == Data.self || type == URL.self || type == Decimal.self { throw giveUp() }
        return try Value(from: JSONValueDecoder(reader: self, node: index))
    }

    func isNull(_ index: Int) -> Bool {
        nodes[index].kind == .null
    }

    func bool(at index: Int) throws -> Bool {
        switch nodes[index].kind {
        case .true: return true
        case .false: return false
        default: throw giveUp()
        }
    }

    func string(at index: Int) throws -> String {
        let node = nodes[index]
        switch node.kind {
        case .string:
            return bytes.withUnsafeBufferPointer {
                String(decoding: UnsafeBufferPointer(rebasing: $0[node.start..<node.end]), as: UTF8.self)
            }
        case .escapedString:
            return String(decoding: try unescaped(node), as: UTF8.self)
        default:
            throw giveUp()
        }
    }

    /// An integer written as one (no fraction, no exponent) that fits `type`; Foundation
    /// decides the rest.
    func integer<Integer: FixedWidthInteger>(_ type: Integer.Type, at index: Int) throws -> Integer {
        let node = nodes[index]
        guard node.kind == .integer else { throw giveUp() }
        var position = node.start
        let negative = bytes[position] == UInt8(ascii: "-")
        if negative { position += 1 }
        var magnitude: UInt64 = 0
        while position < node.end {
            let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(bytes[position] &- UInt8(ascii: "0")))
            guard !overflow, !carry else { throw giveUp() }
            magnitude = sum
            position += 1
        }
        if negative {
            guard magnitude > 0, magnitude <= UInt64(Int64.max) + 1 else { throw giveUp() }
            guard let value = Integer(exactly: magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude))
            else { throw giveUp() }
            return value
        }
        guard let value = Integer(exactly: magnitude) else { throw giveUp() }
        return value
    }

    /// A finite number, correctly rounded by `strtod` as Foundation's is.
    func double(at index: Int) throws -> Double {
        let node = nodes[index]
        guard node.kind == .integer || node.kind == .number else { throw giveUp() }
        let length = node.end - node.start
        // An integer of up to 15 digits converts exactly.
        if node.kind == .integer, length <= 15 {
            var position = node.start
            let negative = bytes[position] == UInt8(ascii: "-")
            if negative { position += 1 }
            var magnitude = 0
            while position < node.end {
                magnitude = magnitude * 10 + Int(bytes[position] &- UInt8(ascii: "0"))
                position += 1
            }
            return negative ? -Double(magnitude) : Double(magnitude)
        }
        guard length < 64 else { throw giveUp() }
        let value = withUnsafeTemporaryAllocation(of: CChar.self, capacity: length + 1) { text in
            for offset in 0..<length { text[offset] = CChar(bitPattern: bytes[node.start + offset]) }
            text[length] = 0
            return strtod(text.baseAddress!, nil)
        }
        guard value.isFinite else { throw giveUp() }
        return value
    }

    /// The bytes of an escaped string with its escapes resolved.
    private func unescaped(_ node: Node) throws -> [UInt8] {
        var text: [UInt8] = []
        text.reserveCapacity(node.end - node.start)
        var position = node.start
        while position < node.end {
            let byte = bytes[position]
            position += 1
            guard byte == UInt8(ascii: "\\") else {
                text.append(byte)
                continue
            }
            let escape = bytes[position]
            position += 1
            switch escape {
            case UInt8(ascii: "b"): text.append(0x08)
            case UInt8(ascii: "f"): text.append(0x0C)
            case UInt8(ascii: "n"): text.append(0x0A)
            case UInt8(ascii: "r"): text.append(0x0D)
            case UInt8(ascii: "t"): text.append(0x09)
            case UInt8(ascii: "u"):
                let unit = hex4(at: position)
                position += 4
                var scalar = unit
                if (0xD800..<0xDC00).contains(unit) {
                    // A high surrogate takes the low one that must follow; anything else is
                    // Foundation's to judge.
                    guard position + 6 <= node.end, bytes[position] == UInt8(ascii: "\\"),
                        bytes[position + 1] == UInt8(ascii: "u")
                    else { throw giveUp() }
                    let low = hex4(at: position + 2)
                    guard (0xDC00..<0xE000).contains(low) else { throw giveUp() }
                    position += 6
                    scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(unit) {
                    throw giveUp()
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw giveUp() }
                text.append(contentsOf: UTF8.encode(unicode)!)
            default: text.append(escape)  // `"`, `\` and `/`, as the parser checked
            }
        }
        return text
    }

    private func hex4(at position: Int) -> UInt32 {
        var value: UInt32 = 0
        for offset in 0..<4 {
            value = value << 4 | UInt32(JSONParser.hexValue(bytes[position + offset]) ?? 0)
        }
        return value
    }

    // MARK: Objects

    /// The value node of member `key` of object `object`; nil if it has none, and giving up if
    /// it has it twice.
    func member(_ key: String, of object: Int) throws -> Int? {
        let node = nodes[object]
        guard node.start <= Self.scanLimit else { return try keyIndex(of: object)[key] }
        var found: Int?
        var keyIndex = object + 1
        var key = key
        try key.withUTF8 { wanted in
            try bytes.withUnsafeBufferPointer { bytes in
                while keyIndex < node.next {
                    let keyNode = nodes[keyIndex]
                    let same =
                        keyNode.kind == .string
                        ? keyNode.end - keyNode.start == wanted.count
                            && (wanted.isEmpty
                                || memcmp(wanted.baseAddress!, bytes.baseAddress! + keyNode.start, wanted.count) == 0)
                        : try unescaped(keyNode).elementsEqual(wanted)
                    if same {
                        guard found == nil else { throw giveUp() }
                        found = keyIndex + 1
                    }
                    keyIndex = nodes[keyIndex + 1].next
                }
            }
        }
        return found
    }

    /// The keys of object `object`, in the document's order.
    func keys(of object: Int) throws -> [String] {
        var keys: [String] = []
        var keyIndex = object + 1
        while keyIndex < nodes[object].next {
            keys.append(try string(at: keyIndex))
            keyIndex = nodes[keyIndex + 1].next
        }
        return keys
    }

    private func keyIndex(of object: Int) throws -> [String: Int] {
        if let index = keyIndexes[object] { return index }
        var index: [String: Int] = [:]
        var keyIndex = object + 1
        while keyIndex < nodes[object].next {
            guard index.updateValue(keyIndex + 1, forKey: try string(at: keyIndex)) == nil else { throw giveUp() }
            keyIndex = nodes[keyIndex + 1].next
        }
        keyIndexes[object] = index
        return index
    }

    // MARK: Coding paths

    /// The coding path of node `target`, found by walking down from the document's root (only
    /// user code that asks pays for it).
    func codingPath(to target: Int) -> [any CodingKey] {
        var path: [any CodingKey] = []
        var index = 0
        while index != target {
            let node = nodes[index]
            guard node.kind == .object || node.kind == .array else { break }
            var child = index + 1
            var position = 0
            while child < node.next {
                let value = node.kind == .object ? child + 1 : child
                if target < nodes[value].next {
                    path.append(
                        node.kind == .object
                            ? JSONCodingKey(stringValue: (try? string(at: child)) ?? "")
                            : JSONCodingKey(index: position))
                    index = value
                    break
                }
                child = nodes[value].next
                position += 1
            }
            guard child < node.next else { break }
        }
        return path
    }
}

/// A coding key read from a document: a member's name, or an element's index.
struct JSONCodingKey: CodingKey {
    let stringValue: String
    let intValue: Int?

    init(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }

    init(intValue: Int) {
        self.init(index: intValue)
    }

    init(index: Int) {
        stringValue = "Index \(index)"
        intValue = index
    }
}
