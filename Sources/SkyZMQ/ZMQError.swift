import CZMQ

/// An error reported by libzmq, carrying its errno and zmq's own text for it.
///
/// Every failing libzmq call in the wrapper throws one of these, so a caller can both show
/// a precise message ("zmq_bind(tcp://127.0.0.1:5555): Address already in use") and switch
/// on the code (``isAddressInUse``, ``isWouldBlock``...).
public struct ZMQError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The errno value libzmq reported.
    public let code: Int32
    /// The call that failed, with its argument when that helps (an endpoint, an option).
    public let operation: String
    /// libzmq's text for ``code`` (`zmq_strerror`). Made when asked: every read that finds
    /// nothing more ends in an `EAGAIN` error, which nobody shows.
    public var message: String { String(cString: zmq_strerror(code)) }

    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// Captures `zmq_errno()` right after a failed call.
    static func last(_ operation: @autoclosure () -> String) -> ZMQError {
        ZMQError(code: zmq_errno(), operation: operation())
    }

    public var description: String { "\(operation): \(message)" }

    /// The operation would block (`EAGAIN`): a full queue on a non-blocking send or nothing to read.
    public var isWouldBlock: Bool { code == EAGAIN }
    /// The endpoint is already bound by someone else (`EADDRINUSE`).
    public var isAddressInUse: Bool { code == EADDRINUSE }
    /// What to do about a failed `zmq_bind`, for the errors a person's endpoint causes; `nil`
    /// for others.
    public var bindAdvice: String? {
        switch code {
        case EADDRINUSE: "Another process (another skybroker?) uses it; stop it, or pick another endpoint"
        // libzmq takes a host to bind as an interface name, and says ENODEV for a DNS name.
        case ENODEV:
            "A tcp:// host to bind is an IP address of this machine, * for all of them, or an interface name such as eth0; a DNS name is not looked up"
        case EADDRNOTAVAIL:
            "That address is not one of this machine's (see `ip addr`); bind 127.0.0.1, * or one of its own"
        case ENAMETOOLONG: "An ipc:// path is at most 107 bytes; use a shorter one"
        case ENOENT: "The ipc:// path's directory does not exist; make it first"
        case EACCES: "This user may not create that ipc:// path or bind that port (ports below 1024 need privileges)"
        default: nil
        }
    }

    /// A ROUTER with `ROUTER_MANDATORY` has no peer with that routing id (`EHOSTUNREACH`).
    public var isHostUnreachable: Bool { code == EHOSTUNREACH }
    /// The context or socket was terminated (`ETERM`).
    public var isTerminated: Bool { code == ETERM }
    /// The call was interrupted by a signal (`EINTR`); it can be retried.
    public var isInterrupted: Bool { code == EINTR }
}
