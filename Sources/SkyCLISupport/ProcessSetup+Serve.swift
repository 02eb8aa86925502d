import Logging
import ServiceLifecycle
import UnixSignals

extension ProcessSetup {
    /// Runs `service` until SIGTERM or SIGINT has stopped it gracefully, as every Sky server
    /// does, and returns, so that the caller's deferred flushes run. A failure, at start or
    /// later, is one line naming `program` and exit status 1: thrown out of the command, it
    /// would read "Error: …" without the program's name.
    public static func serveUntilSignalled(_ service: some Service, program: String, logger: Logger) async {
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: service)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            fail(program, "\(error)")
        }
    }
}
