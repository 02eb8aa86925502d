/// Tells a wrong broker key from a flaky network: a CURVE server that cannot open a client's
/// HELLO closes the connection without a word, and libzmq then reconnects forever. Connections
/// that close before their handshake completes, several times in a row, mean the keys do not
/// match.
struct HandshakeWatch {
    /// Connections closed before a handshake, in a row, that count as a refusal.
    static let strikes = 3

    private var handshakeDone = false
    private var closedInARow = 0

    mutating func succeeded() {
        handshakeDone = true
        closedInARow = 0
    }

    /// A connection closed. Returns whether enough closed in a row before their handshake.
    mutating func closedBeforeHandshake() -> Bool {
        defer { handshakeDone = false }
        guard !handshakeDone else { return false }
        closedInARow += 1
        return closedInARow >= Self.strikes
    }
}
