import SkyWire

/// Field codecs shared by every Sky command: signatures, command bytes, integers, names.
public enum WireFormat {
    /// Client protocol signature, version 1.
    public static let clientSignature: [UInt8] = Array("SKYC01".utf8)
    /// Worker protocol signature, version 1.
    public static let workerSignature: [UInt8] = Array("SKYW01".utf8)
    /// Event protocol signature, version 1.
    public static let eventSignature: [UInt8] = Array("SKYE01".utf8)
    /// Client protocol signature of a packed message (version 2: the signature, command and
    /// fixed fields in one header frame, then the body). Only REQUEST and REPLY have this form.
    public static let packedClientSignature: [UInt8] = Array("SKYC02".utf8)
    /// Worker protocol signature of a packed message (version 2). Only REQUEST and REPLY.
    public static let packedWorkerSignature: [UInt8] = Array("SKYW02".utf8)
    /// The feature a peer names to take packed messages: in `mmi.features` (a broker to its
    /// clients) and in FEATURES (a broker to a worker, and a worker's answer to that).
    public static let packedFeature = "packed"

    /// Longest service or worker name, in bytes.
    public static let maxNameLength = 255

    /// Checks the signature and returns the command byte.
    static func command(of frames: Frames, signature: [UInt8]) throws(ProtocolError) -> UInt8 {
        guard !frames.isEmpty else { throw .empty }
        let first = frames[0]
        guard first.elementsEqual(signature) else { throw .unknownSignature(Array(first)) }
        guard frames.count >= 2 else { throw .missingCommand }
        let command = frames[1]
        guard command.count == 1 else { throw .invalidCommandFrame(length: command.count) }
        return command[command.startIndex]
    }

    /// The header fields of a packed message with `signature` (after its command byte),
    /// checked to be `command` in `frameCounts` frames; `nil` when the first frame is not a
    /// packed header with `signature` (a version 1 signature frame, or anything else).
    static func packedFields(
        of frames: Frames, signature: [UInt8], command: UInt8, name: String, frameCounts: ClosedRange<Int>
    ) throws(ProtocolError) -> PackedFields? {
        guard !frames.isEmpty else { return nil }
        let first = frames[0]
        // Compared as bytes in place: the generic `starts(with:)` ran unspecialised on every
        // message, in every process (and six bytes cost less one at a time than as words).
        guard first.count > signature.count,
            first.withUnsafeBytes({ bytes in
                signature.withUnsafeBytes { expected in
                    for index in 0..<expected.count where bytes[index] != expected[index] { return false }
                    return true
                }
            })
        else { return nil }
        let byte = first[first.startIndex + signature.count]
        guard byte == command else { throw .unknownCommand(byte) }
        guard frameCounts.contains(frames.count) else {
            let expected =
                frameCounts.count == 1
                ? "\(frameCounts.lowerBound)" : "\(frameCounts.lowerBound) or \(frameCounts.upperBound)"
            throw .wrongFrameCount(command: name, expected: expected, actual: frames.count)
        }
        // The fields straight into the reader: returned as an optional tuple first, they were
        // destroyed through the runtime's generic witness on every message.
        return PackedFields(first[(first.startIndex + signature.count + 1)...], command: name)
    }

    /// Whether two buffers of one length hold the same bytes, compared eight at a time (the
    /// generic `elementsEqual` went through iterators: 30 instructions a byte).
    static func sameBytes(_ given: UnsafeRawBufferPointer, _ other: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset + 8 <= given.count {
            guard
                given.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                    == other.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            else { return false }
            offset += 8
        }
        while offset < given.count {
            guard given[offset] == other[offset] else { return false }
            offset += 1
        }
        return true
    }

    /// A REQUEST's trace frame: 1...``TraceContext/maxBytes`` bytes, read by tracers only.
    static func traceFrame(_ frame: ArraySlice<UInt8>) throws(ProtocolError) -> [UInt8] {
        guard (1...TraceContext.maxBytes).contains(frame.count) else {
            throw .invalidValue(name: "trace", reason: "\(frame.count) bytes; 1...\(TraceContext.maxBytes) allowed")
        }
        return Array(frame)
    }

    static func expectFrames(
        _ frames: Frames, _ count: Int, command: String
    ) throws(ProtocolError) {
        guard frames.count == count else {
            throw .wrongFrameCount(command: command, expected: "\(count)", actual: frames.count)
        }
    }

    /// Decodes a service or worker name: 1...255 bytes of UTF-8 without control characters.
    public static func name(_ frame: [UInt8]) throws(ProtocolError) -> String { try name(frame[...]) }

    /// A name of another kind than a service's (a worker's, a feature's): the error says which.
    static func name(_ frame: ArraySlice<UInt8>, of kind: String) throws(ProtocolError) -> String {
        do {
            return try name(frame)
        } catch {
            throw .invalidValue(name: kind, reason: "not 1...255 bytes of UTF-8 without control characters")
        }
    }

    static func name(_ frame: ArraySlice<UInt8>) throws(ProtocolError) -> String {
        // Decoded from the bytes in place, checked in one pass: an ASCII name (the usual) needs
        // no validation beyond its bytes, and `String(validating:)` of a slice ran
        // unspecialised, looking up generic metadata on every call, once per message in the
        // worker.
        let name = frame.withUnsafeBufferPointer { bytes -> String? in
            switch nameShape(bytes) {
            case .invalid: nil
            case .ascii: String(decoding: bytes, as: UTF8.self)
            case .beyondASCII: String(validating: bytes, as: UTF8.self)
            }
        }
        guard let name else { throw .invalidServiceName }
        return name
    }

    /// The names of a FEATURES (either way: `[SKYW01][0x09][name]...`), each a valid name, at most
    /// ``WorkerToBroker/maxFeatures``.
    static func featureNames(_ frames: Frames) throws(ProtocolError) -> [String] {
        let most = WorkerToBroker.maxFeatures
        guard (2...2 + most).contains(frames.count) else {
            throw .wrongFrameCount(command: "FEATURES", expected: "2...\(2 + most)", actual: frames.count)
        }
        var names: [String] = []
        for index in 2..<frames.count { names.append(try name(frames[index], of: "feature name")) }
        return names
    }

    /// Checks that a name is valid before it goes on the wire.
    public static func isValidName(_ name: String) -> Bool {
        // A Swift string is valid UTF-8 already: the rest is checked on its UTF-8 bytes in place
        // (this runs on every call a client makes; the `utf8` view's generic path is far slower
        // than the bytes).
        if let shape = name.utf8.withContiguousStorageIfAvailable(nameShape) { return shape != .invalid }
        var name = name
        return name.withUTF8 { nameShape($0) != .invalid }
    }

    /// What is wrong with `name` as a service or worker name (`what`: "service name", "worker
    /// name"), in one line for an error; `nil` if it is valid. The name is quoted with its
    /// control characters escaped and cut to 40 characters, so that a runaway value still makes
    /// a readable line.
    public static func nameProblem(_ name: String, what: String) -> String? {
        guard !isValidName(name) else { return nil }
        let shown = name.count > 40 ? "\(name.prefix(40))…" : name
        return
            "\(what) \(String(reflecting: shown)) (\(name.utf8.count) bytes) is not 1...\(maxNameLength) bytes of UTF-8"
            + " without control characters"
    }

    /// A name's rules besides valid UTF-8, checked in one pass over its bytes: 1...``maxNameLength``
    /// bytes, no control characters; and whether it is all ASCII (valid UTF-8 as it is).
    enum NameShape { case invalid, ascii, beyondASCII }

    /// A name's ``NameShape``, read eight bytes at a time (a byte at a time took two comparisons
    /// a byte, on every call a client makes); the last word is padded with spaces.
    static func nameShape(_ bytes: UnsafeBufferPointer<UInt8>) -> NameShape {
        guard (1...maxNameLength).contains(bytes.count) else { return .invalid }
        let raw = UnsafeRawBufferPointer(bytes)
        var all: UInt64 = 0
        var offset = 0
        while offset + 8 <= raw.count {
            let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            if hasControlByte(word) { return .invalid }
            all |= word
            offset += 8
        }
        if offset < raw.count {
            var word: UInt64 = 0x2020_2020_2020_2020
            withUnsafeMutableBytes(of: &word) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[offset...])) }
            if hasControlByte(word) { return .invalid }
            all |= word
        }
        return all & 0x8080_8080_8080_8080 == 0 ? .ascii : .beyondASCII
    }

    /// Whether any byte of `word` is a control character: below 0x20, or 0x7f. The tests for
    /// "a byte below n" and "a zero byte" on a whole word (exact as to whether any byte is one,
    /// whatever the bytes' high bits).
    @inline(__always) static func hasControlByte(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let below = (word &- 0x20 &* ones) & ~word & highs
        let delete = word ^ (0x7f &* ones)
        return (below | ((delete &- ones) & ~delete & highs)) != 0
    }

    /// Decodes a delivery tag: 1...255 opaque bytes the broker chose (Sky's broker uses 8).
    static func deliveryTag(_ frame: ArraySlice<UInt8>) throws(ProtocolError) -> DeliveryTag {
        guard !frame.isEmpty, frame.count <= 255 else {
            throw .invalidValue(name: "delivery tag", reason: "\(frame.count) bytes")
        }
        return DeliveryTag(frame)
    }

    static func uint32(_ frame: [UInt8], name: String) throws(ProtocolError) -> UInt32 {
        try uint32(frame[...], name: name)
    }

    static func uint32(_ frame: ArraySlice<UInt8>, name: String) throws(ProtocolError) -> UInt32 {
        guard frame.count == 4 else { throw .invalidField(name: name, expectedLength: 4, actual: frame.count) }
        return frame.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(as: UInt32.self)) }
    }

    static func uint64(_ frame: [UInt8], name: String) throws(ProtocolError) -> UInt64 {
        try uint64(frame[...], name: name)
    }

    static func uint64(_ frame: ArraySlice<UInt8>, name: String) throws(ProtocolError) -> UInt64 {
        guard frame.count == 8 else { throw .invalidField(name: name, expectedLength: 8, actual: frame.count) }
        return frame.withUnsafeBytes { UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)) }
    }

    static func bytes(_ value: UInt32) -> [UInt8] {
        ByteArray.written(capacity: 4) { buffer in
            buffer.storeBytes(of: value.bigEndian, as: UInt32.self)
            return 4
        }
    }

    static func bytes(_ value: UInt64) -> [UInt8] {
        ByteArray.written(capacity: 8) { buffer in
            buffer.storeBytes(of: value.bigEndian, as: UInt64.self)
            return 8
        }
    }

    /// Appends `value` big-endian, without an array of its own (bodies built field by field,
    /// once per job).
    static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { raw in
            // Typed: appending a raw buffer copies byte by byte.
            bytes.append(contentsOf: raw.assumingMemoryBound(to: UInt8.self))
        }
    }
}
