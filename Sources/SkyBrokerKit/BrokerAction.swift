import SkyProtocol

/// What the broker's I/O shell must do after feeding an input to ``BrokerStateMachine``.
public enum BrokerAction: Sendable, Equatable {
    /// Send a command to a client on the clients ROUTER.
    case sendToClient(PeerID, BrokerToClient)
    /// Send a command to a worker on the workers ROUTER.
    case sendToWorker(PeerID, BrokerToWorker)
    /// Publish an event. Its ``SkyEvent/time`` is empty: the shell stamps the wall clock.
    case publish(SkyEvent)
    /// Write a log line.
    case log(BrokerLogLevel, String)
}

public enum BrokerLogLevel: Sendable, Equatable {
    case debug, info, warning
}
