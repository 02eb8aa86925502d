import Foundation
import SkyZMQ
import Testing

@testable import SkyBrokerKit

@Suite("ZAP handler: per-role allow-lists, fail closed")
struct ZAPAuthenticatorTests {
    static func request(domain: String, mechanism: String = "CURVE", key: [UInt8]?) -> [[UInt8]] {
        var frames: [[UInt8]] = [[7, 7], [], Array("1.0".utf8), Array("42".utf8)]
        frames += [Array(domain.utf8), Array("127.0.0.1".utf8), [], Array(mechanism.utf8)]
        if let key { frames.append(key) }
        return frames
    }

    @Test func eachRoleAdmitsOnlyItsOwnListAndEverythingElseIsDenied() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("zap-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let client = try CurveKeyPair.generate()
        let worker = try CurveKeyPair.generate()
        // A list file with comments; and a worker directory.
        let clientList = directory.appendingPathComponent("clients.txt").path
        try "# clients\n\n\(client.publicKey.z85)\n".write(toFile: clientList, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(
            at: directory.appendingPathComponent("workers"), withIntermediateDirectories: true)
        _ = try CurveKeyFile.write(worker, name: "w", directory: directory.appendingPathComponent("workers").path)
        try FileManager.default.removeItem(at: directory.appendingPathComponent("workers/w.key"))
        var zap = ZAPAuthenticator(
            security: BrokerSecurity(
                keys: try CurveKeyPair.generate(),
                allowLists: [.client: clientList, .worker: directory.appendingPathComponent("workers").path]))

        func decision(_ domain: String, _ key: CurveKey?, mechanism: String = "CURVE") -> ZAPAuthenticator.Decision? {
            zap.answer(Self.request(domain: domain, mechanism: mechanism, key: key?.bytes))?.decision
        }
        #expect(decision("sky-clients", client.publicKey) == .allowed(userID: "client:\(client.publicKey.z85)"))
        #expect(decision("sky-workers", worker.publicKey) == .allowed(userID: "worker:\(worker.publicKey.z85)"))
        for (domain, key) in [("sky-clients", worker.publicKey), ("sky-workers", client.publicKey)] {
            guard case .denied = decision(domain, key) else {
                Issue.record("\(domain) admitted a key from another role's list")
                continue
            }
        }
        if case .allowed = decision("sky-watchers", client.publicKey) { Issue.record("a role without a list admitted") }
        if case .allowed = decision("sky-clients", nil, mechanism: "NULL") { Issue.record("NULL admitted") }
        if case .allowed = decision("elsewhere", client.publicKey) { Issue.record("an unknown domain admitted") }
        // The reply goes back to the asking peer with the request id and a status.
        let reply = try #require(zap.answer(Self.request(domain: "sky-clients", key: client.publicKey.bytes))?.reply)
        #expect(reply[0] == [7, 7] && reply[1].isEmpty && reply[3] == Array("42".utf8))
        #expect(reply[4] == Array("200".utf8))
        // Revoking: the list is read again once it changed.
        try "# nobody\n".write(toFile: clientList, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes(
            [.modificationDate: Date().addingTimeInterval(5)], ofItemAtPath: clientList)
        guard case .denied = decision("sky-clients", client.publicKey) else {
            Issue.record("a revoked key was still admitted")
            return
        }
    }

    /// An allow-list that cannot be read admits nobody (fail closed) and says why.
    @Test func anUnreadableAllowListAdmitsNobodyAndNamesTheFile() throws {
        let client = try CurveKeyPair.generate()
        let missing = "/nonexistent-\(UUID().uuidString)/clients"
        var zap = ZAPAuthenticator(
            security: BrokerSecurity(keys: try CurveKeyPair.generate(), allowLists: [.client: missing]))
        let answer = zap.answer(Self.request(domain: "sky-clients", key: client.publicKey.bytes))
        guard case .denied = answer?.decision else {
            Issue.record("an unreadable list admitted a key: \(String(describing: answer?.decision))")
            return
        }
        #expect(answer?.reply[4] != Array("200".utf8))
        #expect(zap.lastError?.contains(missing) == true, "\(zap.lastError ?? "no error")")
    }

    @Test func keyFilesRoundTripAndASecretKeyOthersMayReadIsRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let pair = try CurveKeyPair.generate()
        let paths = try CurveKeyFile.write(pair, name: "n", directory: directory.path)
        #expect(try CurveKeyFile.readSecret(paths.secret) == pair)
        #expect(try CurveKeyFile.readAllowList(directory.path) == [pair.publicKey])
        // Z85 has "#" in its alphabet (digit 84): a key holding it is a key, not a comment. A
        // 4-byte group whose value is 84 ends in "#", so this key has eight, every run. (No key
        // starts with "#": a first digit is at most (2^32 - 1) / 85^4 = 82.)
        let group: [UInt8] = [0, 0, 0, 84]
        let hashes = try CurveKey(bytes: Array(repeatElement(group, count: 8).joined()))
        #expect(hashes.z85.filter { $0 == "#" }.count == 8)
        let list = directory.appendingPathComponent("list").path
        try "# Sky keys, one per line\n  \(pair.publicKey.z85)  \n\(hashes.z85)\n#not a key\n".write(
            toFile: list, atomically: true, encoding: .utf8)
        #expect(try CurveKeyFile.readAllowList(list) == [pair.publicKey, hashes])
        // A public key file given as the secret is refused, saying so: at the mode keygen gives
        // it (where it was told "chmod 600 it" first), and at 600.
        for mode: mode_t in [0o644, 0o600] {
            chmod(paths.public, mode)
            #expect {
                try CurveKeyFile.readSecret(paths.public)
            } throws: { error in
                "\(error)".contains("is a public key file")
            }
        }
        chmod(paths.secret, 0o644)
        #expect(throws: CurveKeyError.unsafePermissions(path: paths.secret)) {
            try CurveKeyFile.readSecret(paths.secret)
        }
        #expect(throws: CurveKeyError.exists(path: paths.secret)) {
            try CurveKeyFile.write(pair, name: "n", directory: directory.path)
        }
    }
}
