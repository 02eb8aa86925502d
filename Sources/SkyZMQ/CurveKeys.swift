import CZMQ
import Foundation

/// A CURVE key (32 bytes), written as Z85 text (40 characters) in files and flags.
///
/// Generated and converted by libzmq itself (`zmq_curve_keypair`, `zmq_z85_encode`), so the
/// keys are the ones every ZeroMQ peer understands.
public struct CurveKey: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// - Throws: ``CurveKeyError/invalid(_:)`` unless `bytes` has 32 bytes.
    public init(bytes: [UInt8]) throws(CurveKeyError) {
        guard bytes.count == 32 else { throw .invalid("a CURVE key has 32 bytes, not \(bytes.count)") }
        self.bytes = bytes
    }

    /// Decodes 40 characters of Z85.
    public init(z85 text: String) throws(CurveKeyError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard trimmed.utf8.count == 40 else {
            throw .invalid("a Z85 CURVE key has 40 characters, not \(trimmed.utf8.count)")
        }
        var decoded = [UInt8](repeating: 0, count: 32)
        guard zmq_z85_decode(&decoded, trimmed) != nil else { throw .invalid("not Z85 text: \(trimmed)") }
        bytes = decoded
    }

    /// The Z85 text form.
    public var z85: String {
        var text = [CChar](repeating: 0, count: 41)
        _ = bytes.withUnsafeBufferPointer { zmq_z85_encode(&text, $0.baseAddress, 32) }
        return Self.string(text)
    }

    /// Z85, like the files. ``CurveKeyPair`` never prints its secret key this way.
    public var description: String { z85 }

    /// The 40 characters of a NUL-terminated Z85 buffer libzmq filled.
    static func string(_ text: [CChar]) -> String {
        String(decoding: text.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A CURVE key pair.
public struct CurveKeyPair: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    public let publicKey: CurveKey
    public let secretKey: CurveKey

    /// A new random pair.
    /// - Throws: ``CurveKeyError/unsupported`` if libzmq was built without CURVE.
    public static func generate() throws(CurveKeyError) -> CurveKeyPair {
        var publicText = [CChar](repeating: 0, count: 41)
        var secretText = [CChar](repeating: 0, count: 41)
        guard zmq_curve_keypair(&publicText, &secretText) == 0 else { throw .unsupported }
        return CurveKeyPair(
            publicKey: try CurveKey(z85: CurveKey.string(publicText)),
            secretKey: try CurveKey(z85: CurveKey.string(secretText)))
    }

    /// The public key only: a pair printed in a log or a failed test must not leak its secret.
    public var description: String { "CurveKeyPair(public: \(publicKey.z85), secret: redacted)" }
    public var debugDescription: String { description }

    /// The pair of a secret key (the public key is derived from it).
    public init(secretKey: CurveKey) throws(CurveKeyError) {
        var publicText = [CChar](repeating: 0, count: 41)
        guard zmq_curve_public(&publicText, secretKey.z85) == 0 else { throw .unsupported }
        self.publicKey = try CurveKey(z85: CurveKey.string(publicText))
        self.secretKey = secretKey
    }

    init(publicKey: CurveKey, secretKey: CurveKey) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Options for a socket that connects to a CURVE server whose public key is `server`.
    public func clientOptions(server: CurveKey) -> [ZMQSocketOption] {
        [.curveServerKey(server.bytes), .curvePublicKey(publicKey.bytes), .curveSecretKey(secretKey.bytes)]
    }

    /// Options for a socket that serves CURVE and authenticates its peers in ZAP `domain`.
    public func serverOptions(domain: String) -> [ZMQSocketOption] {
        [.curveServer(true), .curveSecretKey(secretKey.bytes), .zapDomain(domain)]
    }
}

/// The keys a client, worker or watcher needs to reach a CURVE broker: the broker's public key
/// and its own key pair (whose public key must be on the broker's allow-list for its role).
public struct CurveCredentials: Sendable, Equatable {
    /// The broker's public key.
    public var brokerKey: CurveKey
    /// This peer's own key pair.
    public var keys: CurveKeyPair

    public init(brokerKey: CurveKey, keys: CurveKeyPair) {
        self.brokerKey = brokerKey
        self.keys = keys
    }

    /// Reads the broker's public key file and this peer's secret key file (mode 0600).
    public init(brokerKeyFile: String, secretKeyFile: String) throws(CurveKeyError) {
        brokerKey = try CurveKeyFile.readPublic(brokerKeyFile)
        keys = try CurveKeyFile.readSecret(secretKeyFile)
    }

    /// Socket options for a connection to the broker.
    public var socketOptions: [ZMQSocketOption] { keys.clientOptions(server: brokerKey) }
}

/// What went wrong with a key or key file; each case says what to do.
public enum CurveKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalid(String)
    case unreadable(path: String, reason: String)
    case unsafePermissions(path: String)
    case exists(path: String)
    case missingDirectory(path: String)
    case unsupported

    public var description: String {
        switch self {
        case .invalid(let reason): "invalid CURVE key: \(reason)"
        case .unreadable(let path, let reason): "cannot read the key file \(path): \(reason)"
        case .unsafePermissions(let path):
            "the secret key file \(path) can be read by other users; chmod 600 it (a leaked secret key lets anyone act as its owner)"
        case .exists(let path): "\(path) exists already; remove it or choose another name (keys are never overwritten)"
        case .missingDirectory(let path): "the directory \(path) does not exist; create it first (mkdir -p \(path))"
        case .unsupported: "this libzmq was built without CURVE support (libsodium); install Debian's libzmq5"
        }
    }
}

/// Key files: one Z85 key per file (`NAME.key` secret, mode 0600; `NAME.pub` public), and
/// allow-lists that are a directory of `.pub` files or one file with a key per line. Lines
/// starting with `#` that are not a key are comments.
public enum CurveKeyFile {
    /// Writes `NAME.key` (mode 0600) and `NAME.pub` into `directory`; never overwrites.
    /// - Returns: the two paths, secret first.
    public static func write(_ pair: CurveKeyPair, name: String, directory: String) throws(CurveKeyError)
        -> (secret: String, public: String)
    {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw .missingDirectory(path: directory)
        }
        let secretPath = (directory as NSString).appendingPathComponent("\(name).key")
        let publicPath = (directory as NSString).appendingPathComponent("\(name).pub")
        for path in [secretPath, publicPath] where FileManager.default.fileExists(atPath: path) {
            throw .exists(path: path)
        }
        // Created with mode 0600 from the start: never readable by others, not even briefly.
        let fd = open(secretPath, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw .unreadable(path: secretPath, reason: String(cString: strerror(errno))) }
        let secretText = Array("# Sky CURVE secret key (\(name)); keep it private\n\(pair.secretKey.z85)\n".utf8)
        let written = secretText.withUnsafeBytes { Foundation.write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == secretText.count else {
            throw .unreadable(path: secretPath, reason: "short write")
        }
        do {
            try "\(publicKeyHeader) (\(name))\n\(pair.publicKey.z85)\n".write(
                toFile: publicPath, atomically: true, encoding: .utf8)
        } catch {
            throw .unreadable(path: publicPath, reason: "\(error)")
        }
        return (secretPath, publicPath)
    }

    /// How a public key file that keygen writes begins.
    static let publicKeyHeader = "# Sky CURVE public key"

    /// Reads a secret key file (refused if other users may read it) and derives its pair.
    public static func readSecret(_ path: String) throws(CurveKeyError) -> CurveKeyPair {
        var status = stat()
        guard stat(path, &status) == 0 else { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
        // A public key reads as a key too: taken as the secret, it made a broker whose public
        // key matched no peer's copy, and every peer was refused. Said before the permissions,
        // which a public key file need not keep ("chmod 600 it" sent its owner the wrong way).
        let text = try readText(path)
        if text.hasPrefix(publicKeyHeader) {
            throw .invalid(
                "\(path) is a public key file (its first line says so); give the secret key file, the .key that keygen wrote beside it"
            )
        }
        guard status.st_mode & 0o077 == 0 else { throw .unsafePermissions(path: path) }
        let keys = try keys(in: text, of: path)
        guard keys.count == 1 else { throw .invalid("\(path) holds \(keys.count) keys; a secret key file holds one") }
        return try CurveKeyPair(secretKey: keys[0])
    }

    /// Reads a public key file.
    public static func readPublic(_ path: String) throws(CurveKeyError) -> CurveKey {
        let keys = try readKeys(path)
        guard keys.count == 1 else { throw .invalid("\(path) holds \(keys.count) keys; a public key file holds one") }
        return keys[0]
    }

    /// The keys of an allow-list: every `.pub` file of a directory, or every line of a file.
    public static func readAllowList(_ path: String) throws(CurveKeyError) -> Set<CurveKey> {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw .unreadable(path: path, reason: "no such file or directory")
        }
        guard isDirectory.boolValue else { return Set(try readKeys(path)) }
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: path)
        } catch {
            throw .unreadable(path: path, reason: "the directory cannot be listed")
        }
        var keys = Set<CurveKey>()
        for name in names.sorted() where name.hasSuffix(".pub") {
            keys.formUnion(try readKeys((path as NSString).appendingPathComponent(name)))
        }
        return keys
    }

    private static func readKeys(_ path: String) throws(CurveKeyError) -> [CurveKey] {
        try keys(in: try readText(path), of: path)
    }

    /// A key file's text.
    private static func readText(_ path: String) throws(CurveKeyError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason =
                FileManager.default.fileExists(atPath: path) ? "Permission denied" : "No such file or directory"
            throw .unreadable(path: path, reason: reason)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw .invalid("\(path) is not UTF-8 text; a key file holds a 40-character Z85 key")
        }
        return text
    }

    /// The keys of a key file's text: a line each, blank lines and comments skipped.
    private static func keys(in text: String, of path: String) throws(CurveKeyError) -> [CurveKey] {
        var keys: [CurveKey] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            // Z85 has "#" in its alphabet but no space: a key is 40 characters without one.
            let isKey = trimmed.utf8.count == 40 && !trimmed.contains(where: \.isWhitespace)
            if trimmed.isEmpty || (!isKey && trimmed.hasPrefix("#")) { continue }
            do {
                keys.append(try CurveKey(z85: trimmed))
            } catch {
                throw .invalid("\(path): \(error)")
            }
        }
        return keys
    }
}
