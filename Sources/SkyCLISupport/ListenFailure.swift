import FlyingSocks
import Foundation

/// An HTTP listener's failure to start, in one phrase: FlyingFox's error printed as a Swift enum
/// (`failed(type: "Bind", errno: 98, message: "Address already in use")`).
public enum ListenFailure {
    public static func text(_ error: any Error) -> String {
        guard case SocketError.failed(let call, let code, let message) = error else { return "\(error)" }
        if code == EADDRINUSE { return "the port is in use (another process listens there)" }
        if code == EACCES { return "\(message.lowercased()) (a port below 1024 needs privileges)" }
        if code == EADDRNOTAVAIL { return "no interface of this machine has that address" }
        return "\(call.lowercased()) failed: \(message.lowercased())"
    }
}
