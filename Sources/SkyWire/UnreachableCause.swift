/// What libzmq's monitor showed of an endpoint while no connection to it is up, in words for an
/// error or a log line: nothing accepts there, or something takes TCP but no ZeroMQ handshake.
/// Without it a wrong port reads only as "no connection" (or "no word from the broker").
///
/// Needs the socket's monitor to report ``ZMQMonitorEvent/Kind/connected`` and
/// ``ZMQMonitorEvent/Kind/connectRetried`` besides the handshake and disconnection events.
public struct UnreachableCause: Sendable {
    /// What was seen last, if anything worth saying.
    public private(set) var text: String?
    /// The current socket made a TCP connection that completed no handshake since (kept when
    /// it closes: a server that speaks no ZeroMQ closes it, and the retry that follows is not
    /// "nothing listens").
    private var tcpWithoutHandshake = false

    public init() {}

    public mutating func observe(_ event: ZMQMonitorEvent) {
        switch event.kind {
        case .connectRetried where !tcpWithoutHandshake:
            text =
                "\(event.endpoint) accepts no connection (nothing listens there, or the host is unreachable or does not resolve)"
        case .connected:
            tcpWithoutHandshake = true
            text =
                "\(event.endpoint) accepts TCP connections but completes no ZeroMQ handshake (another kind of server on that port?)"
        case .handshakeSucceeded:
            tcpWithoutHandshake = false
            text = nil
        default:
            break
        }
    }

    /// A new socket replaces the one observed: what it sees starts from nothing.
    public mutating func newSocket() {
        tcpWithoutHandshake = false
        text = nil
    }
}
