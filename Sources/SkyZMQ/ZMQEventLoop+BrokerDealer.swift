extension ZMQEventLoop.SocketSpec {
    /// The DEALER a client or a worker opens to the broker: one definition of how Sky connects
    /// to it. libzmq reconnects by itself 250 ms after a broken connection, doubling to 4 s
    /// (plus its own jitter), so a restarted broker is found again within seconds.
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
                .reconnectInterval(milliseconds: 250), .reconnectIntervalMax(milliseconds: 4000),
            ] + options + (credentials?.socketOptions ?? []),
            connect: [endpoint], monitor: monitor)
    }
}
