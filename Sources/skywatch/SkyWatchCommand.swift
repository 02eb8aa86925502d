import ArgumentParser
import Logging
import SkyCLISupport
import SkyProtocol
import SkyZMQ

@main
struct SkyWatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skywatch",
        abstract: "Prints the events of a Sky broker: workers connecting and leaving.",
        discussion: """
            Subscribes to the broker's events endpoint and prints one line per event (--json: one
            JSON object per line). The broker greets each new subscriber with a broker.hello event
            listing the workers connected at that moment. Runs until interrupted.
            """)

    @Option(help: "The broker's events endpoint.")
    var events = "tcp://127.0.0.1:5557"

    @Flag(help: "Print events as JSON lines.")
    var json = false

    @OptionGroup var common: CommonOptions

    func run() async throws {
        let logger = ProcessSetup.prepare(label: "skywatch", options: common)
        let socket = ZMQEventLoop.SocketID(0, name: "events")
        let loop = try await ZMQEventLoop.start(
            name: "skywatch-io",
            sockets: [.init(id: socket, type: .sub, options: [.subscribe([])], connect: [events])])
        logger.info("watching \(events)")
        for await batch in loop.inbound {
            for case .message(_, let message) in batch {
                do {
                    let event = try SkyEvent.decode(message.frames)
                    ProcessSetup.line(json ? event.jsonLine() : EventFormatter.line(event))
                } catch {
                    logger.warning("ignored a message that is not a Sky event: \(error)")
                }
            }
        }
    }
}
