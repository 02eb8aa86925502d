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

        @Option(help: "Not started before this many seconds after it is recorded.")
        var delay: Double?

        @Option(help: "Priority, -128 to 127 (higher first among waiting jobs of its service).")
        var priority = 0

        @Option(help: "An idempotency key (1 to 255 bytes): a second submit with it returns the first job.")
        var key: String?

        @Option(
            help:
                "Make --key a unique job's key: while-queued, while-running, or a number of seconds (held that long after the submit)."
        )
        var unique: String?

        @Option(help: "How long one attempt may run, in seconds (none by default).")
        var timeout: Double?

        @Option(help: "Attempts (1 to 1000; a timed-out attempt is tried again).")
        var maxAttempts = RetryPolicy.default.maxAttempts

        @Option(help: "How long the outcome is kept after the job ended, in seconds.")
        var retention: Double = 86_400

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            if let problem = WireFormat.nameProblem(service, what: "service") { throw ValidationError(problem) }
            if let delay { try FlagCheck.seconds(delay, "--delay", in: 0...315_360_000) }
            try FlagCheck.integer(priority, "--priority", in: Int(Int8.min)...Int(Int8.max))
            if let key, !(1...JobSubmission.maxKeyLength).contains(key.utf8.count) {
                throw ValidationError("--key is \(key.utf8.count) bytes; 1 to \(JobSubmission.maxKeyLength)")
            }
            if unique != nil {
                guard key != nil else { throw ValidationError("--unique makes --key a unique job's key: give --key") }
                _ = try uniqueHold()
            }
            if let timeout { try FlagCheck.seconds(timeout, "--timeout", in: 0.001...4_000_000) }
            try FlagCheck.integer(maxAttempts, "--max-attempts", in: 1...1000)
            try FlagCheck.seconds(retention, "--retention", in: 0...315_360_000)
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
            var job = JobOptions(
                delay: delay.map(FlagCheck.duration(seconds:)), priority: JobPriority(rawValue: Int8(priority)),
                idempotencyKey: key, unique: try uniqueHold(), retention: FlagCheck.duration(seconds: retention),
                timeout: timeout.map(FlagCheck.duration(seconds:)))
            job.retry.maxAttempts = maxAttempts
            let service = service
            await options.run("skyctl") { client in
                print("\(try await client.submit(service: service, body: body, options: job))")
            }
        }
    }
}

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
