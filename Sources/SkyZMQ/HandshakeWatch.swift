/// Tells a misconfigured connection from a flaky network: a CURVE server that cannot open a
/// client's HELLO closes the connection without a word (and libzmq then reconnects forever), and
/// a socket of the wrong type (a DEALER pointed at the broker's events port) fails its handshake
/// and is never reconnected. Connections that close before their handshake completes, several
/// times in a row, mean the keys or the endpoint are wrong. The client and the worker both
/// watch their broker connection with it.
package struct HandshakeWatch: Sendable {
    /// Connections closed before a handshake, in a row, that count as a refusal.
    package static let strikes = 3

    package init() {}

    private var handshakeDone = false
    private var closedInARow = 0

    package mutating func succeeded() {
        handshakeDone = true
        closedInARow = 0
    }

    /// Connections closed before their handshake in a row so far.
    package var closedInARowSoFar: Int { closedInARow }

    /// A connection closed. Returns whether enough closed in a row before their handshake.
    package mutating func closedBeforeHandshake() -> Bool {
        defer { handshakeDone = false }
        guard !handshakeDone else { return false }
        closedInARow += 1
        return closedInARow >= Self.strikes
    }
}
