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
            With --keep, the call is kept as a job if it is left (its --timeout passes, or this
            process is stopped or killed) before its result, and the job's id is printed on
            standard error before the call goes out: read it later with skyctl jobs show ID
            --result. A call kept at its --timeout exits 3 (the work goes on). The broker must
            keep a journal.
            """)

    @Argument(help: "The service to call.")
    var service: String

    @Option(help: "The task, as the handler's JSON; - reads it from standard input.")
    var json: String

    @Option(parsing: .unconditional, help: "How long to wait for the result, in seconds.")
    var timeout: Double = 30

    @Flag(help: "Keep the call as a job if it is left before its result; its id is printed first, on standard error.")
    var keep = false

    @Option(help: "The key (a customer, a tenant) whose calls take turns with other keys' calls of the service.")
    var concurrencyKey: String?

    @Option(
        parsing: .unconditional, help: "At most this many calls of --concurrency-key run at once (1 to 1000000).")
    var concurrencyLimit: Int?

    @OptionGroup var options: BrokerOptions

    /// The exit status of a call kept as a job at its `--timeout`: not a failure (its work goes
    /// on), not a result either.
    static let keptExitCode: Int32 = 3

    func validate() throws {
        if let problem = WireFormat.nameProblem(service, what: "service") { throw ValidationError(problem) }
        try FlagCheck.seconds(timeout, "--timeout", in: 0.001...86_400)
        try JobFlags.checkConcurrency(key: concurrencyKey, limit: concurrencyLimit, of: "calls")
    }

    func run() async throws {
        let body = TaskBody.read(json)
        let length = FlagCheck.duration(seconds: timeout)
        let call = ScanOptions(
            timeout: length, deadline: length, retry: .never, concurrencyKey: concurrencyKey,
            concurrencyLimit: concurrencyLimit)
        let service = service
        let keptAs = keep ? JobID.random() : nil
        await options.run("skyctl") { client in
            let result: [UInt8]
            if let keptAs {
                switch await client.brokerSays(\.keepsAbandonedCalls) {
                case true?: break
                case false?:
                    throw CommandFailure(
                        "--keep needs a broker that keeps abandoned calls (it names \(BrokerFeatures.keepIfAbandonedFeature) in mmi.features), and this one does not: it keeps no journal (--state-dir none), or is older. Nothing was sent: call without --keep, or give the broker a journal"
                    )
                case nil: throw client.silentBroker(needing: BrokerFeatures.keepIfAbandonedFeature)
                }
                // Said before the call goes out: whoever stops this process can still find the work.
                ProcessSetup.standardError(
                    "skyctl: if this call is left before its result, it is kept as job \(keptAs)\n")
                do {
                    result = try await client.request(service: service, body: body, keptAs: keptAs, options: call)
                } catch SkyError.keptAsJob(let id) {
                    ProcessSetup.standardError(
                        "skyctl: the call's --timeout passed; it goes on as job \(id): skyctl jobs show \(id) --result\n"
                    )
                    await client.close()
                    Foundation.exit(Self.keptExitCode)
                }
            } else {
                do {
                    result = try await client.request(service: service, body: body, options: call)
                } catch SkyError.timeout(let message) {
                    // The broker names a paused service at the call's deadline, but this
                    // client's own timer ends the call first: asked here, it is said instead of
                    // "add workers".
                    if let services = try? await client.services(),
                        services.contains(where: { $0.name == service && $0.paused })
                    {
                        throw CommandFailure(
                            "the call timed out: \(message); \(service) is paused, so nothing of it runs until it is resumed (skyctl services resume \(service))"
                        )
                    }
                    throw SkyError.timeout(message)
                }
            }
            print(String(decoding: result, as: UTF8.self))
        }
    }
}
