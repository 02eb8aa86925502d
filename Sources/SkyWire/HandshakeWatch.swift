/// Tells a misconfigured connection from a flaky network: a CURVE server that cannot open a
/// client's HELLO closes the connection without a word (and libzmq then reconnects forever), and
/// a socket of the wrong type (a DEALER pointed at the broker's events port) fails its handshake
/// and is never reconnected. Connections that close before their handshake completes, several
/// times in a row, mean the keys or the endpoint are wrong. The client and the worker both
/// watch their broker connection with it.
public struct HandshakeWatch: Sendable {
    /// Connections closed before a handshake, in a row, that count as a refusal.
    public static let strikes = 3

    public init() {}

    private var handshakeDone = false
    private var closedInARow = 0

    public mutating func succeeded() {
        handshakeDone = true
        closedInARow = 0
    }

    /// Connections closed before their handshake in a row so far.
    public var closedInARowSoFar: Int { closedInARow }

    /// A connection closed. Returns whether enough closed in a row before their handshake.
    public mutating func closedBeforeHandshake() -> Bool {
        defer { handshakeDone = false }
        guard !handshakeDone else { return false }
        closedInARow += 1
        return closedInARow >= Self.strikes
    }
}
