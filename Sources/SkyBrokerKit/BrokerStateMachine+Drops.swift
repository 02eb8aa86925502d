import SkyProtocol

extension BrokerStateMachine {
    /// Why the shell kept a message or a connection from the machine.
    package enum Drop: Sendable, Equatable {
        /// A message over the port's limits (the routing-id frame not counted).
        case oversized(port: String, frames: Int, bytes: Int64, frameLimit: Int, byteLimit: Int64)
        /// A message without an authenticated key of the port's role (CURVE on).
        case unauthenticated(port: String)
        /// The ZAP handler refused a CURVE handshake.
        case handshakeDenied(reason: String)
    }

    /// The shell dropped something before it became an input: counted and logged here, so that
    /// every counter has one writer.
    package mutating func dropped(_ drop: Drop, now: Instant, into actions: inout [BrokerAction]) {
        switch drop {
        case .oversized(let port, let frames, let bytes, let frameLimit, let byteLimit):
            counters.oversizedMessages += 1
            logAboutPeer(.warning, "dropped a message over the limits", now: now, into: &actions) {
                [
                    "port": port, "frames": "\(frames)", "bytes": "\(bytes)", "frameLimit": "\(frameLimit)",
                    "byteLimit": "\(byteLimit)",
                ]
            }
        case .unauthenticated(let port):
            counters.unauthenticatedMessages += 1
            logAboutPeer(.warning, "dropped a message without an authenticated key", now: now, into: &actions) {
                ["port": port]
            }
        case .handshakeDenied(let reason):
            counters.handshakesDenied += 1
            logAboutPeer(.warning, "refused a connection", now: now, into: &actions) { ["reason": reason] }
        }
    }

    /// A log line about what a peer sent: its text, and its level (a summary of held-back lines
    /// keeps the level of the lines it stands for).
    struct PeerLine: Hashable, Sendable {
        var level: BrokerLogLevel
        var message: String
    }

    /// Logs a line about what a peer sent wrong, within ``Configuration/peerLinesPerSecond`` lines
    /// of the same text a second. A peer can send garbage as fast as the network carries it, and
    /// each line is formatted and written on the I/O thread, slowing every real request
    /// (docs/security.md, "What is measured"). Lines beyond the budget are counted and summarised
    /// in one line when their second is over; the counters count every message. `fields` is built
    /// only for a line that is written.
    mutating func logAboutPeer(
        _ level: BrokerLogLevel, _ message: String, now: Instant, into actions: inout [BrokerAction],
        fields: () -> [String: String]
    ) {
        let line = PeerLine(level: level, message: message)
        let admission = peerLines.admit(line, now: now)
        if admission.heldBackBefore > 0 { actions.append(heldBack(line, count: admission.heldBackBefore)) }
        if admission.allowed { actions.append(.log(level, message, fields())) }
    }

    /// At a tick: a summary for each line whose second is over with lines held back.
    mutating func summariseHeldBackLines(now: Instant, into actions: inout [BrokerAction]) {
        for (line, count) in peerLines.endedSeconds(now: now) { actions.append(heldBack(line, count: count)) }
    }

    private func heldBack(_ line: PeerLine, count: Int) -> BrokerAction {
        .log(
            line.level, "more lines like this were held back (the counters count every message)",
            ["line": line.message, "heldBack": "\(count)", "perSecond": "\(configuration.peerLinesPerSecond)"])
    }
}
