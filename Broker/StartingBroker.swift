import Logging
import ServiceLifecycle
import SkyBrokerKit
import SkyCLISupport
import SkyZMQ

/// The broker's whole life as one service of the process's service group: its start (which, on
/// a PostgreSQL store another broker holds, is a standby's wait of any length), its ready line,
/// and its serving. Started inside the group, so that SIGTERM or SIGINT stops a waiting standby
/// too (it leaves the store's list of standbys and exits 0), and a signal that comes between
/// the end of the wait and the broker's own handler is not lost: a graceful shutdown handler
/// installed after the shutdown began runs at once.
struct StartingBroker: Service {
    let configuration: BrokerConfiguration
    let metricsURL: String?
    let logger: Logger

    func run() async throws {
        let stopping = Locked(false)
        let broker: Broker
        do {
            broker = try await withGracefulShutdownHandler {
                try await Broker.start(configuration: configuration, logger: logger) { stopping.withLock { $0 } }
            } onGracefulShutdown: {
                stopping.withLock { $0 = true }
            }
        } catch let stopped as BrokerStoppedWaiting {
            logger.notice("stopped while waiting as a standby", metadata: ["store": "\(stopped.store)"])
            return
        } catch {
            ProcessSetup.fail("skybroker", "\(error)")
        }
        let bound = broker.endpoints
        ProcessSetup.readyLine(
            "skybroker ready clients=\(bound.clients) workers=\(bound.workers) events=\(bound.events)"
                + (metricsURL.map { " metrics=\($0)" } ?? ""))
        try await broker.run()
    }
}
