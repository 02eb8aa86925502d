/// One pass over JSON bytes into `JSONByteReader`'s nodes, in document order: a container's
/// node, then its members' (an object's alternate key and value) and their insides.
///
/// It checks what Foundation's parser checks (the grammar, escapes, control characters, UTF-8,
/// nothing after the value); whatever it does not take is `JSONByteReader.GiveUp`, and the
/// reader's caller hands the bytes to Foundation, which reports the error.
struct JSONParser {
    typealias Node = JSONByteReader.Node

    private let bytes: [UInt8]
    private var position = 0
    private var depth = 0
    private var nodes: [Node] = []

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The nodes of the whole document.
    mutating func document() throws -> [Node] {
        nodes.reserveCapacity(8)
        skipWhitespace()
        try value()
        skipWhitespace()
        guard position == bytes.count else { throw JSONByteReader.GiveUp() }
        return nodes
    }

    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private var next: UInt8? {
        position < bytes.count ? bytes[position] : nil
    }

    private mutating func skipWhitespace() {
        while let byte = next, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            position += 1
        }
    }

    private mutating func value() throws {
        guard let next else { throw JSONByteReader.GiveUp() }
        switch next {
        case UInt8(ascii: "{"): try container(isObject: true)
        case UInt8(ascii: "["): try container(isObject: false)
        case UInt8(ascii: "\""): try string()
        case UInt8(ascii: "t"): try literal("true", .true)
        case UInt8(ascii: "f"): try literal("false", .false)
        case UInt8(ascii: "n"): try literal("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
        default: throw JSONByteReader.GiveUp()
        }
    }

    private mutating func container(isObject: Bool) throws {
        depth += 1
        guard depth <= JSONByteReader.depthLimit else { throw JSONByteReader.GiveUp() }
        let index = nodes.count
        nodes.append(Node(kind: isObject ? .object : .array, start: 0, end: 0, next: 0))
        position += 1
        skipWhitespace()
        let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
        var count = 0
        if next == close {
            position += 1
        } else {
            while true {
                if isObject {
                    guard next == UInt8(ascii: "\"") else { throw JSONByteReader.GiveUp() }
                    try string()
                    skipWhitespace()
                    guard next == UInt8(ascii: ":") else { throw JSONByteReader.GiveUp() }
                    position += 1
                    skipWhitespace()
                }
                try value()
                count += 1
                skipWhitespace()
                if next == UInt8(ascii: ",") {
                    position += 1
                    skipWhitespace()
                } else if next == close {
                    position += 1
                    break
                } else {
                    throw JSONByteReader.GiveUp()
                }
            }
        }
        nodes[index].start = count
        nodes[index].next = nodes.count
        depth -= 1
    }

    private mutating func string() throws {
        position += 1
        let start = position
        var escaped = false
        var nonASCII = false
        while true {
            position = bytes.withUnsafeBufferPointer { JSONText.firstSpecial(in: $0, from: position, nonASCII: true) }
            guard let byte = next else { throw JSONByteReader.GiveUp() }
            if byte == UInt8(ascii: "\"") { break }
            position += 1
            if byte == UInt8(ascii: "\\") {
                escaped = true
                try escape()
            } else if byte < 0x20 {
                throw JSONByteReader.GiveUp()
            } else if byte >= 0x80 {
                nonASCII = true
            }
        }
        if nonASCII {
            let valid = bytes.withUnsafeBufferPointer {
                String(validating: UnsafeBufferPointer(rebasing: $0[start..<position]), as: UTF8.self) != nil
            }
            guard valid else { throw JSONByteReader.GiveUp() }
        }
        nodes.append(Node(kind: escaped ? .escapedString : .string, start: start, end: position, next: nodes.count + 1))
        position += 1
    }

    /// Checks the escape after a backslash.
    private mutating func escape() throws {
        guard let byte = next else { throw JSONByteReader.GiveUp() }
        position += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            return
        case UInt8(ascii: "u"):
            guard position + 4 <= bytes.count,
                (position..<(position + 4)).allSatisfy({ Self.hexValue(bytes[$0]) != nil })
            else { throw JSONByteReader.GiveUp() }
            position += 4
        default:
            throw JSONByteReader.GiveUp()
        }
    }

    private mutating func number() throws {
        let start = position
        var integer = true
        if next == UInt8(ascii: "-") { position += 1 }
        if next == UInt8(ascii: "0") {
            position += 1
        } else {
            guard digits() else { throw JSONByteReader.GiveUp() }
        }
        if next == UInt8(ascii: ".") {
            integer = false
            position += 1
            guard digits() else { throw JSONByteReader.GiveUp() }
        }
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            // Foundation refuses some numbers whose integer part is a bare 0 followed by an
            // exponent (`0e1`, but not `0e+1` or `-0e1`): a form no writer uses, left to it.
            if position - start == 1, bytes[start] == UInt8(ascii: "0") { throw JSONByteReader.GiveUp() }
            integer = false
            position += 1
            if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { position += 1 }
            guard digits() else { throw JSONByteReader.GiveUp() }
        }
        nodes.append(Node(kind: integer ? .integer : .number, start: start, end: position, next: nodes.count + 1))
    }

    /// Skips digits; whether there was one.
    private mutating func digits() -> Bool {
        let start = position
        while let byte = next, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { position += 1 }
        return position > start
    }

    private mutating func literal(_ text: StaticString, _ kind: Node.Kind) throws {
        let count = text.utf8CodeUnitCount
        guard position + count <= bytes.count else { throw JSONByteReader.GiveUp() }
        let matches = text.withUTF8Buffer { literal in
            (0..<count).allSatisfy { bytes[position + $0] == literal[$0] }
        }
        guard matches else { throw JSONByteReader.GiveUp() }
        nodes.append(Node(kind: kind, start: position, end: position + count, next: nodes.count + 1))
        position += count
    }
}
