import SkyWire

extension ZMQEventLoop.SocketSpec {
    /// The DEALER a client or a worker opens to the broker: one definition of how Sky connects
    /// to it. libzmq reconnects by itself 250 ms after a broken connection, doubling to 1 s
    /// (plus its own jitter of up to 250 ms), so a broker restarted after any outage is found
    /// again within about a second and a half: with 4 s, workers came back 4 s after a broker
    /// that had been down 30 s. A refused connect to a loopback or LAN port costs next to nothing.
    /// - Parameters:
    ///   - highWaterMark: messages queued each way before sends wait (0: no limit).
    ///   - credentials: CURVE, when the broker runs with keys.
    ///   - options: options of this role on top (a routing id, ZMTP heartbeats).
    public static func brokerDealer(
        id: ZMQEventLoop.SocketID, endpoint: String, highWaterMark: Int32, credentials: CurveCredentials?,
        options: [ZMQSocketOption] = [], monitor: ZMQMonitorEvent.Kind.Set? = nil
    ) -> ZMQEventLoop.SocketSpec {
        ZMQEventLoop.SocketSpec(
            id: id, type: .dealer,
            options: [
                .sendHighWaterMark(highWaterMark), .receiveHighWaterMark(highWaterMark),
                .reconnectInterval(milliseconds: 250), .reconnectIntervalMax(milliseconds: 1000),
            ] + options + (credentials?.socketOptions ?? []),
            connect: [endpoint], monitor: monitor)
    }
}
