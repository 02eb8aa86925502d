import ArgumentParser
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

/// A call from the shell, as `grpcurl` or `celery call` make one.
struct CallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Calls a service once and prints its result (the handler's JSON); exits 1 naming the error.",
        discussion: """
            The task is the JSON its handler decodes, given with --json, or read from standard
            input with --json -. One attempt: a failure is said, not retried. Example:
              skyctl call sky.echo --json '{"message":"hello"}'
            """)

    @Argument(help: "The service to call.")
    var service: String

    @Option(help: "The task, as the handler's JSON; - reads it from standard input.")
    var json: String

    @Option(help: "How long to wait for the result, in seconds.")
    var timeout: Double = 30

    @OptionGroup var options: BrokerOptions

    func validate() throws {
        if let problem = WireFormat.nameProblem(service, what: "service") { throw ValidationError(problem) }
        try FlagCheck.seconds(timeout, "--timeout", in: 0.001...86_400)
    }

    func run() async throws {
        let body = TaskBody.read(json)
        let call = ScanOptions(timeout: FlagCheck.duration(seconds: timeout), retry: .never)
        let service = service
        await options.run("skyctl") { client in
            let result = try await client.request(service: service, body: body, options: call)
            print(String(decoding: result, as: UTF8.self))
        }
    }
}
