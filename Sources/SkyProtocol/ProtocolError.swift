/// Why a message is not a valid Sky protocol message. Decoding never traps: every malformed
/// input yields one of these, so a process can count it, log it and go on serving.
public enum ProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The message had no frames at all (only possible on a ROUTER after its routing id).
    case empty
    /// The first frame is not the signature the socket speaks ("SKYC01", "SKYW01", "SKYE01").
    case unknownSignature([UInt8])
    /// There is no command frame after the signature.
    case missingCommand
    /// The command frame is not exactly one byte.
    case invalidCommandFrame(length: Int)
    /// The command byte is not one the protocol defines for this direction.
    case unknownCommand(UInt8)
    /// The command has the wrong number of frames.
    case wrongFrameCount(command: String, expected: String, actual: Int)
    /// A request id frame is not exactly 16 bytes.
    case invalidRequestID(length: Int)
    /// A service name is empty, longer than 255 bytes, not UTF-8 or contains control characters.
    case invalidServiceName
    /// A fixed-size field has the wrong length.
    case invalidField(name: String, expectedLength: Int, actual: Int)
    /// A field that may have one of several lengths has another: its message lists them all
    /// (a 10-byte request header once read "expected 8", while 12 and 16 are valid too).
    case invalidFieldLength(name: String, allowedLengths: [Int], actual: Int)
    /// A field's value is out of range.
    case invalidValue(name: String, reason: String)

    public var description: String {
        switch self {
        case .empty: "empty message"
        case .unknownSignature(let bytes):
            "unknown signature \(Hex.encode(Array(bytes.prefix(16))))\(Self.known(bytes))"
        case .missingCommand: "missing command frame"
        case .invalidCommandFrame(let length): "command frame of \(length) bytes (expected 1)"
        case .unknownCommand(let byte): "unknown command 0x\(Hex.encode([byte]))"
        case .wrongFrameCount(let command, let expected, let actual):
            "\(command) with \(actual) frames (expected \(expected))"
        case .invalidRequestID(let length): "request id of \(length) bytes (expected 16)"
        case .invalidServiceName: "invalid service name"
        case .invalidField(let name, let expected, let actual):
            "\(name) of \(actual) bytes (expected \(expected))"
        case .invalidFieldLength(let name, let allowed, let actual):
            "\(name) of \(actual) bytes (expected \(Self.alternatives(allowed)))"
        case .invalidValue(let name, let reason): "invalid \(name): \(reason)"
        }
    }

    /// What a signature another port or socket takes is: a worker's READY on the clients port
    /// read "unknown signature 534b59573031", which says nothing to whoever made the mistake.
    private static func known(_ bytes: [UInt8]) -> String {
        switch bytes {
        case WireFormat.clientSignature, WireFormat.packedClientSignature:
            " (\(String(decoding: bytes, as: UTF8.self)): the client protocol's, for the broker's clients port)"
        case WireFormat.workerSignature, WireFormat.packedWorkerSignature:
            " (\(String(decoding: bytes, as: UTF8.self)): the worker protocol's, for the broker's workers port)"
        case WireFormat.eventSignature:
            " (SKYE01: the event protocol's, which the broker only publishes)"
        default: ""
        }
    }

    /// "8", "8 or 12", "8, 12 or 16".
    private static func alternatives(_ lengths: [Int]) -> String {
        let words = lengths.map(String.init)
        guard let last = words.last, words.count > 1 else { return words.first ?? "" }
        return words.dropLast().joined(separator: ", ") + " or " + last
    }
}
