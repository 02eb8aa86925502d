import ArgumentParser
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

extension JobsCommand {
    struct Submit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Submits a durable job from the shell; prints its id once it is on the broker's disk.",
            discussion: """
                The task is the JSON its handler decodes, given with --json, or read from standard
                input with --json -. Examples:
                  skyctl jobs submit sky.echo --json '{"message":"hello"}'
                  skyctl jobs submit reports.daily --json - --key report-42 --unique while-running < task.json
                """)

        @Argument(help: "The service that runs the job.")
        var service: String

        @Option(help: "The task, as the handler's JSON; - reads it from standard input.")
        var json: String

        @Option(parsing: .unconditional, help: "Not started before this many seconds after it is recorded.")
        var delay: Double?

        @Option(help: "An idempotency key (1 to 255 bytes): a second submit with it returns the first job.")
        var key: String?

        @Option(
            help:
                "Make --key a unique job's key: while-queued, while-running, or a number of seconds (held that long after the submit)."
        )
        var unique: String?

        @OptionGroup var job: JobFlags

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            if let problem = WireFormat.nameProblem(service, what: "service") { throw ValidationError(problem) }
            if let delay { try FlagCheck.seconds(delay, "--delay", in: 0...315_360_000) }
            if let key, !(1...JobSubmission.maxKeyLength).contains(key.utf8.count) {
                throw ValidationError("--key is \(key.utf8.count) bytes; 1 to \(JobSubmission.maxKeyLength)")
            }
            if unique != nil {
                guard key != nil else { throw ValidationError("--unique makes --key a unique job's key: give --key") }
                _ = try uniqueHold()
            }
        }

        private func uniqueHold() throws -> JobOptions.Unique? {
            switch unique {
            case nil: return nil
            case "while-queued": return .whileQueued
            case "while-running": return .whileRunning
            case let text?:
                guard let seconds = Double(text), seconds >= 1, seconds <= 31_622_400 else {
                    throw ValidationError(
                        "--unique \(text): use while-queued, while-running, or a number of seconds from 1 to 31622400")
                }
                return .for(FlagCheck.duration(seconds: seconds))
            }
        }

        func run() async throws {
            let body = TaskBody.read(json)
            let submitted = job.options(
                JobOptions(
                    delay: delay.map(FlagCheck.duration(seconds:)), idempotencyKey: key, unique: try uniqueHold()))
            let service = service
            await options.run("skyctl") { client in
                print("\(try await client.submit(service: service, body: body, options: submitted))")
                // A typo queues a job nobody runs: say so, on stderr (stdout is the id alone).
                // It waits all the same, until a worker of the service registers.
                if let services = try? await client.services(),
                    (services.first { $0.name == service }?.workers ?? 0) == 0
                {
                    FileHandle.standardError.write(
                        Data(
                            "note: no worker serves \(service) now; the job waits until one registers. Check the name (skyctl services list)\n"
                                .utf8))
                }
            }
        }
    }
}
