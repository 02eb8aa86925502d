import SkyProtocol

extension BrokerStateMachine {
    /// Why the shell kept a message or a connection from the machine.
    public enum Drop: Sendable, Equatable {
        /// A message over the port's limits (the routing-id frame not counted).
        case oversized(port: String, frames: Int, bytes: Int64, frameLimit: Int, byteLimit: Int64)
        /// A message without an authenticated key of the port's role (CURVE on).
        case unauthenticated(port: String)
        /// The ZAP handler refused a CURVE handshake.
        case handshakeDenied(reason: String)
    }

    /// The shell dropped something before it became an input: counted and logged here, so that
    /// every counter has one writer.
    public mutating func dropped(_ drop: Drop, into actions: inout [BrokerAction]) {
        switch drop {
        case .oversized(let port, let frames, let bytes, let frameLimit, let byteLimit):
            counters.oversizedMessages += 1
            actions.append(
                .log(
                    .warning, "dropped a message over the limits",
                    [
                        "port": port, "frames": "\(frames)", "bytes": "\(bytes)", "frameLimit": "\(frameLimit)",
                        "byteLimit": "\(byteLimit)",
                    ]))
        case .unauthenticated(let port):
            counters.unauthenticatedMessages += 1
            actions.append(.log(.warning, "dropped a message without an authenticated key", ["port": port]))
        case .handshakeDenied(let reason):
            counters.handshakesDenied += 1
            actions.append(.log(.warning, "refused a connection", ["reason": reason]))
        }
    }
}
