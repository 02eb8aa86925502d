import ArgumentParser
import Foundation
import SkyCLISupport

/// A task given on the command line as the JSON its handler decodes: checked before anything
/// is sent, since text that is not JSON would fail at the worker, every time.
enum TaskBody {
    /// Refuses `bytes` unless they are JSON, naming `flag`.
    static func check(_ bytes: [UInt8], _ flag: String) throws {
        do {
            _ = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        } catch {
            throw ValidationError("\(flag) is not JSON (the task as its handler decodes it, for example '{}')")
        }
    }

    /// The task of `--json TEXT`, or of standard input for `--json -`; exits 64 naming the
    /// flag when it is not JSON.
    static func read(_ text: String) -> [UInt8] {
        let bytes = text == "-" ? Array(FileHandle.standardInput.readDataToEndOfFile()) : Array(text.utf8)
        do {
            try check(bytes, text == "-" ? "--json - (standard input)" : "--json")
        } catch {
            ProcessSetup.standardError("skyctl: \(error)\n")
            exit(64)
        }
        return bytes
    }
}
