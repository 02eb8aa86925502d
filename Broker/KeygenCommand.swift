import ArgumentParser
import Foundation
import SkyCLISupport
import SkyZMQ

/// `skybroker keygen`: writes a new CURVE key pair as Z85 text files.
struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Writes a new CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub (public).",
        discussion: """
            One pair per broker, client, worker and watcher. Give the broker's NAME.pub to every peer
            (--broker-key), keep each NAME.key on its own machine (--secret-key), and put each peer's
            NAME.pub in the broker's allow-list directory for its role. Existing files are never
            overwritten.
            """)

    @Option(help: "The pair's name: the files are NAME.key and NAME.pub.")
    var name: String

    @Option(help: "Where to write them.")
    var directory = "."

    func validate() throws {
        // Letters, digits, '-', '_' and '.', not first: a name that lists and copies safely (a
        // newline or a leading dot made files that `ls` shows oddly or hides).
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        guard let first = name.first, first.isLetter || first.isNumber, name.count <= 100,
            name.allSatisfy(allowed.contains)
        else {
            throw ValidationError(
                "--name \(String(reflecting: name)) is not a key name: use up to 100 letters, digits, '-', '_' and '.', starting with a letter or digit"
            )
        }
    }

    func run() throws {
        do {
            let pair = try CurveKeyPair.generate()
            let paths = try CurveKeyFile.write(pair, name: name, directory: directory)
            print("secret key: \(paths.secret) (mode 0600; keep it on this machine)")
            print("public key: \(paths.public)")
            print(pair.publicKey.z85)
        } catch {
            ProcessSetup.fail("skybroker keygen", "\(error)")
        }
    }
}
