import SkyProtocol

/// What the broker's I/O shell must do after feeding an input to ``BrokerStateMachine``.
public enum BrokerAction: Sendable, Equatable {
    /// Send a command to a client on the clients ROUTER.
    case sendToClient(PeerID, BrokerToClient)
    /// Send a command to a worker on the workers ROUTER.
    case sendToWorker(PeerID, BrokerToWorker)
    /// Publish an event. Its ``SkyEvent/time`` is empty: the shell stamps the wall clock.
    case publish(SkyEvent)
    /// Send frames of the *other* port's protocol to a peer that connected to the wrong port
    /// (a worker on the clients port, a client on the workers port), so it learns its mistake.
    case sendRaw(BrokerPort, PeerID, [[UInt8]])
    /// The queue drained after holding much: return freed memory to the system.
    case releaseMemory
    /// Write a log line: a fixed message, and what varies as metadata (swift-log's structured
    /// fields), so that lines can be searched and counted by message.
    case log(BrokerLogLevel, String, [String: String] = [:])
}

/// The broker's two ROUTER ports.
public enum BrokerPort: Sendable, Equatable {
    case clients, workers
}

public enum BrokerLogLevel: Sendable, Equatable {
    case debug, info, warning
}
