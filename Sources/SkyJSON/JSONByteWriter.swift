import Foundation

/// Writes canonical JSON (keys sorted by their bytes, slashes left alone) straight into bytes, as
/// `Encodable` values hand it over.
///
/// Foundation's `JSONEncoder` with sorted keys builds a tree of boxed values, a dictionary per
/// object, and sorts each dictionary: with its decoder, it made a typed `scan` cost the client
/// twice a raw request. This writer keeps one byte array, one stack of open containers and one
/// list of object members; an object whose members arrive out of order is put in order when it
/// closes.
///
/// It takes only the shapes it can write exactly as Foundation would: containers used in nesting
/// order (as every synthesized `Codable` does), printable ASCII keys, finite numbers. For anything
/// else (a container written after a sibling started, a key needing escapes, a duplicate key, a
/// `superEncoder`, `Data`, `URL`, `Decimal`, 128-bit integers, a top-level value that encodes
/// nothing) it gives up, and `CanonicalJSON` encodes the value with Foundation's encoder, so the
/// bytes and the errors are Foundation's in every case.
final class JSONByteWriter {
    /// Thrown (and remembered, in case user code catches it) when the value needs Foundation.
    struct GiveUp: Error {}

    /// An open object or array.
    private struct Frame {
        let id: Int
        /// The value (see `pending`) whose container this is.
        let owner: Int
        let isObject: Bool
        /// Where its `{` or `[` is.
        let start: Int
        /// Its first entry in `members`.
        let firstMember: Int
        /// The coding path's length to go back to when it closes.
        let pathCount: Int
        /// Opened by a `nestedContainer` call: it ends its parent's member or element, so its
        /// closing adds the `,` that a written value gets at once.
        let endsEntry: Bool
    }

    /// A member of an open object: `"key":value,` from `start`, up to the next member's start.
    private struct Member {
        /// Where the key's opening quote is.
        let start: Int
        /// Where the key's closing quote is.
        let keyEnd: Int
    }

    // A writer lives for one `encode` call on one thread, and no access to its state overlaps
    // another: the runtime's exclusivity checks on these properties cost about a quarter of a
    // small task's encoding, so they are off.
    @exclusivity(unchecked) private(set) var bytes: [UInt8] = []
    @exclusivity(unchecked) private var frames: [Frame] = []
    @exclusivity(unchecked) private var members: [Member] = []
    @exclusivity(unchecked) private var path: [any CodingKey] = []
    /// The last number given to a value or a frame.
    @exclusivity(unchecked) private var serial = 0
    /// The value whose slot is still empty: its encoder may open one container or write one
    /// single value there.
    @exclusivity(unchecked) private var pending: Int?
    @exclusivity(unchecked) private var gaveUp = false

    /// The canonical JSON of `value`, or nil when it needs Foundation's encoder.
    static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8]? {
        let writer = JSONByteWriter()
        do {
            try writer.writeTopLevel(value)
        } catch {
            if error is GiveUp || writer.gaveUp { return nil }
            throw error
        }
        return writer.gaveUp ? nil : writer.bytes
    }

    private init() {
        bytes.reserveCapacity(128)
    }

    /// Marks the encoding as one for Foundation, and returns the error to throw.
    func giveUp() -> GiveUp {
        gaveUp = true
        return GiveUp()
    }

    func codingPath(_ count: Int) -> [any CodingKey] {
        Array(path.prefix(count))
    }

    // MARK: Values

    private func writeTopLevel<Value: Encodable>(_ value: Value) throws {
        if try writeScalar(value) { return }
        let id = startValue()
        try value.encode(to: JSONValueEncoder(writer: self, value: id, pathCount: 0))
        try close(downTo: 0)
        // Foundation throws for a top-level value that encodes nothing.
        if pending == id { throw giveUp() }
    }

    /// Writes a member's or an element's value (without the `,` that follows it).
    func writeValue<Value: Encodable, Key: CodingKey>(_ value: Value, key: Key) throws {
        if try writeScalar(value) { return }
        let id = startValue()
        let depth = frames.count
        path.append(key)
        try value.encode(to: JSONValueEncoder(writer: self, value: id, pathCount: path.count))
        try close(downTo: depth)
        if pending == id {
            // A nested value that encodes nothing is an empty object, as in Foundation.
            pending = nil
            appendLiteral("{}")
        }
        path.removeLast()
    }

    /// Writes `value` into the slot of `owner`, through its single-value container.
    func writeSingleValue<Value: Encodable>(_ value: Value, owner: Int, pathCount: Int) throws {
        guard pending == owner else { throw giveUp() }
        if try writeScalar(value) {
            pending = nil
            return
        }
        // The slot stays pending: the value's own encoder fills it, or the owner's caller
        // writes `{}` if it does not.
        try value.encode(to: JSONValueEncoder(writer: self, value: owner, pathCount: pathCount))
    }

    /// Claims the slot of `owner` for one scalar written by its single-value container.
    func claim(_ owner: Int) throws {
        guard pending == owner else { throw giveUp() }
        pending = nil
    }

    private func startValue() -> Int {
        serial += 1
        pending = serial
        return serial
    }

    /// Writes the standard scalars, and gives up on the types Foundation's encoder writes its
    /// own way; false for everything else.
    private func writeScalar<Value: Encodable>(_ value: Value) throws -> Bool {
        let type = Value.self
        if type == String.self {
            appendString(unsafeBitCast(value, to: String.self))
        } else if type == Int.self {
            appendInteger(unsafeBitCast(value, to: Int.self))
        } else if type == Double.self {
            try appendDouble(unsafeBitCast(value, to: Double.self))
        } else if type == Bool.self {
            appendBool(unsafeBitCast(value, to: Bool.self))
        } else if type == Int64.self {
            appendInteger(unsafeBitCast(value, to: Int64.self))
        } else if type == UInt64.self {
            appendInteger(unsafeBitCast(value, to: UInt64.self))
        } else if type == Int32.self {
            appendInteger(unsafeBitCast(value, to: Int32.self))
        } else if type == UInt32.self {
            appendInteger(unsafeBitCast(value, to: UInt32.self))
        } else if type == UInt.self {
            appendInteger(unsafeBitCast(value, to: UInt.self))
        } else if type == Float.self {
            try appendFloat(unsafeBitCast(value, to: Float.self))
        } else if type == Int16.self {
            appendInteger(unsafeBitCast(value, to: Int16.self))
        } else if type == UInt16.self {
            appendInteger(unsafeBitCast(value, to: UInt16.self))
        } else if type == Int8.self {
            appendInteger(unsafeBitCast(value, to: Int8.self))
        } else if type == UInt8.self {
            appendInteger(unsafeBitCast(value, to: UInt8.self))
        } else if type == Data.self || type == URL.self || type == Decimal.self {
            throw giveUp()
        } else {
            return false
        }
        return true
    }

    // MARK: Containers

    /// The frame for a container of `owner`: a new one if its slot is empty, its open one if
    /// it asks again (as a subclass does after its superclass), or -1 after giving up.
    func container(of owner: Int, isObject: Bool) -> Int {
        if pending == owner {
            pending = nil
            return open(owner: owner, isObject: isObject, endsEntry: false)
        }
        if let index = frames.lastIndex(where: { $0.owner == owner }), frames[index].isObject == isObject {
            return frames[index].id
        }
        gaveUp = true
        return -1
    }

    /// A container opened in place of a member (`key` given) or an element of `frame`; -1
    /// after giving up.
    func nested<Key: CodingKey>(in frame: Int, key: Key, isObject: Bool, asMember: Bool) -> Int {
        do {
            if asMember {
                try beginMember(in: frame, key: key.stringValue)
            } else {
                try enter(frame)
            }
        } catch {
            return -1
        }
        path.append(key)
        serial += 1
        return open(owner: serial, isObject: isObject, endsEntry: true, pathCount: path.count - 1)
    }

    private func open(owner: Int, isObject: Bool, endsEntry: Bool, pathCount: Int? = nil) -> Int {
        serial += 1
        frames.append(
            Frame(
                id: serial, owner: owner, isObject: isObject, start: bytes.count, firstMember: members.count,
                pathCount: pathCount ?? path.count, endsEntry: endsEntry))
        bytes.append(isObject ? UInt8(ascii: "{") : UInt8(ascii: "["))
        return serial
    }

    /// Makes `frame` the innermost open one, closing those inside it; gives up if it was
    /// closed already (a container kept and written after its value ended).
    func enter(_ frame: Int) throws {
        if pending != nil { throw giveUp() }
        if frames.last?.id == frame { return }
        guard let index = frames.lastIndex(where: { $0.id == frame }) else { throw giveUp() }
        try close(downTo: index + 1)
    }

    /// Enters `frame` (an object) and writes `"key":`.
    func beginMember(in frame: Int, key: String) throws {
        try enter(frame)
        let start = bytes.count
        bytes.append(UInt8(ascii: "\""))
        // Printable ASCII without quotes or backslashes: written as they are, and ordered by
        // their bytes exactly as Foundation orders them.
        let written = key.utf8.withContiguousStorageIfAvailable { text -> Bool in
            for byte in text where byte < 0x20 || byte >= 0x7F || byte == 0x22 || byte == 0x5C {
                return false
            }
            bytes.append(contentsOf: text)
            return true
        }
        guard written == true else { throw giveUp() }
        members.append(Member(start: start, keyEnd: bytes.count))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// Ends a member or an element.
    func endEntry() {
        bytes.append(UInt8(ascii: ","))
    }

    private func close(downTo depth: Int) throws {
        while frames.count > depth {
            let frame = frames.removeLast()
            if frame.isObject {
                try closeObject(frame)
            } else if bytes.count - 1 == frame.start {
                bytes.append(UInt8(ascii: "]"))
            } else {
                bytes[bytes.count - 1] = UInt8(ascii: "]")
            }
            if path.count > frame.pathCount { path.removeLast(path.count - frame.pathCount) }
            if frame.endsEntry { endEntry() }
        }
    }

    /// Closes an object, putting its members in key order first if they came in another.
    private func closeObject(_ frame: Frame) throws {
        let first = frame.firstMember
        guard first < members.count else {
            bytes.append(UInt8(ascii: "}"))
            return
        }
        var ordered = true
        for index in (first + 1)..<members.count where !keyPrecedes(members[index - 1], members[index]) {
            ordered = false
            break
        }
        if !ordered { try reorder(from: first) }
        members.removeLast(members.count - first)
        // The last member's `,` becomes the object's `}`.
        bytes[bytes.count - 1] = UInt8(ascii: "}")
    }

    private func reorder(from first: Int) throws {
        let base = members[first].start
        let end = bytes.count
        var parts: [(member: Member, end: Int)] = []
        parts.reserveCapacity(members.count - first)
        for index in first..<members.count {
            parts.append((members[index], index + 1 < members.count ? members[index + 1].start : end))
        }
        parts.sort { keyPrecedes($0.member, $1.member) }
        for index in 1..<parts.count where !keyPrecedes(parts[index - 1].member, parts[index].member) {
            // The same key twice: Foundation decides what that means.
            throw giveUp()
        }
        let written = Array(bytes[base..<end])
        bytes.removeSubrange(base...)
        for part in parts {
            bytes += written[(part.member.start - base)..<(part.end - base)]
        }
    }

    private func keyPrecedes(_ left: Member, _ right: Member) -> Bool {
        bytes[(left.start + 1)..<left.keyEnd].lexicographicallyPrecedes(bytes[(right.start + 1)..<right.keyEnd])
    }

    // MARK: Scalars

    func appendNull() {
        appendLiteral("null")
    }

    func appendBool(_ value: Bool) {
        appendLiteral(value ? "true" : "false")
    }

    private func appendLiteral(_ literal: StaticString) {
        literal.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    func appendString(_ value: String) {
        JSONText.appendString(value, to: &bytes)
    }

    func appendInteger(_ value: some FixedWidthInteger) {
        JSONText.appendInteger(value, to: &bytes)
    }

    /// Swift's shortest round-trip text without a trailing `.0`, as Foundation writes it; a
    /// value JSON cannot hold is Foundation's error to report.
    func appendDouble(_ value: Double) throws {
        guard value.isFinite else { throw giveUp() }
        appendNumber(value.description)
    }

    func appendFloat(_ value: Float) throws {
        guard value.isFinite else { throw giveUp() }
        appendNumber(value.description)
    }

    private func appendNumber(_ text: String) {
        bytes += text.utf8
        if bytes.count >= 2, bytes[bytes.count - 2] == UInt8(ascii: "."), bytes[bytes.count - 1] == UInt8(ascii: "0") {
            bytes.removeLast(2)
        }
    }
}
