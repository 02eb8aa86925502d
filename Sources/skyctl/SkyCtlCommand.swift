import ArgumentParser
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

@main
struct SkyCtlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "skyctl",
        abstract: "Operates a Sky cluster from the command line.",
        subcommands: [
            JobsCommand.self, SchedulesCommand.self, FlowsCommand.self, ServicesCommand.self, LimitsCommand.self,
            CallCommand.self,
        ])
}

/// The flags every skyctl command takes to reach the broker.
struct BrokerOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The broker's clients endpoint; for an active broker and its standbys, each one's, separated by commas.",
            valueName: "endpoint[,endpoint…]"))
    var broker = "tcp://127.0.0.1:5555"

    @OptionGroup var common: CommonOptions

    @OptionGroup var curve: CurveOptions

    func validate() throws {
        try FlagCheck.endpointList(broker, "--broker")
    }

    /// A client of the broker; exits naming the cause when it cannot reach it.
    /// - Parameter retry: `.never` but for a command whose answer may take longer than an
    ///   attempt (a bulk action): its attempts then ask again for the same answer.
    func client(_ program: String, retry: RetryPolicy = .never) async -> SkyClient {
        var configuration = SkyClient.Configuration()
        configuration.logger = ProcessSetup.prepare(label: program, options: common, quiet: true)
        configuration.credentials = curve.credentials(program: program)
        configuration.connectTimeout = .seconds(5)
        // One try per broker endpoint: a wrong endpoint or a stopped broker is said after the
        // connect timeout, not after three of them; with standbys, the next endpoint is tried
        // before the command gives up (one try ended at the failover, with the active broker
        // the next endpoint).
        let endpoints = FlagCheck.endpoints(broker)
        var tries = retry
        tries.maxAttempts = max(retry.maxAttempts, endpoints.count)
        configuration.defaults.retry = tries
        do {
            return try await SkyClient(brokers: endpoints, configuration: configuration)
        } catch {
            ProcessSetup.fail(program, "\(error)")
        }
    }

    /// Runs `body` against the broker; a failure is one line on standard error and exit 1.
    func run(_ program: String, retry: RetryPolicy = .never, _ body: (SkyClient) async throws -> Void) async {
        let client = await client(program, retry: retry)
        do {
            try await body(client)
        } catch {
            await client.close()
            ProcessSetup.fail(program, "\(error)")
        }
        await client.close()
    }
}

/// A command that reached the broker but could not do what it was asked; its text is the line
/// skyctl prints before it exits 1.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Parses a job id argument, naming the mistake.
func jobID(_ text: String) throws -> JobID {
    guard let id = JobID(text) else {
        throw ValidationError("\(text) is not a job id (26 characters of Crockford base32, as submit printed it)")
    }
    return id
}

struct JobsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "jobs",
        abstract: "Submits, lists, shows, cancels and retries durable jobs (docs/jobs.md).",
        subcommands: [Submit.self, List.self, Show.self, Cancel.self, Retry.self, Bulk.self, Failed.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists jobs, newest first.")

        @Option(help: "Only jobs in this state: queued, scheduled, running, succeeded, failed, cancelled.")
        var state: String?

        @Option(help: "Only jobs of this service.")
        var service: String?

        @Option(
            parsing: .unconditional,
            help: "At most this many jobs (at least 1; the broker lists at most 1000, newest first).")
        var limit = 50

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            if let state, JobState(name: state) == nil || state == "unknown" {
                throw ValidationError(
                    "--state \(state) is not a job state; use queued, scheduled, running, succeeded, failed or cancelled"
                )
            }
            // Above the broker's 1,000 a listing is cut, as the broker cuts it for any client
            // (docs/jobs.md), not refused: the same rule whoever asks.
            try FlagCheck.integer(limit, "--limit", in: 1...Int.max)
            if let service, let problem = WireFormat.nameProblem(service, what: "--service") {
                throw ValidationError(problem)
            }
        }

        func run() async throws {
            let most = Int(JobQuery.maxLimit)
            if limit > most {
                ProcessSetup.standardError(
                    "skyctl: --limit \(limit) is more than a listing holds; listing at most \(most)\n")
            }
            await options.run("skyctl") { client in
                let (jobs, matched) = try await client.jobPage(
                    state: state.flatMap(JobState.init(name:)), service: service, limit: min(limit, most))
                if jobs.isEmpty {
                    print("no jobs")
                    return
                }
                JobsCommand.printTable(jobs)
                // The page is not all: say of how many.
                if let matched, matched > jobs.count {
                    let of = matched >= JobListing.countedAtMost ? "at least \(matched)" : "\(matched)"
                    let more =
                        jobs.count < most
                        ? "--limit \(min(matched, most)) shows more" : "narrow it with --state or --service"
                    print("\(jobs.count) of \(of) matching jobs, newest first; \(more)")
                }
            }
        }
    }

    /// Jobs as a table: id, service and where each stands, a line each under a header.
    static func printTable(_ jobs: [(id: JobID, service: String, status: JobStatus)]) {
        let width = max(7, jobs.map(\.service.count).max() ?? 0)
        func padded(_ text: String) -> String { text + String(repeating: " ", count: width - text.count) }
        print("ID                          \(padded("SERVICE"))  STATE")
        for (id, service, status) in jobs { print(Show.printable("\(id)  \(padded(service))  \(status)")) }
    }

    /// The job id a command takes, and the broker it asks.
    struct JobArguments: ParsableArguments {
        @Argument(help: "The job's id (26 characters, as submit printed it).")
        var id: String

        @OptionGroup var options: BrokerOptions

        func validate() throws { _ = try jobID(id) }

        /// `status`, unless the broker knows no such job: then a failure (exit 1), so that a
        /// mistyped id is not a success that prints "unknown".
        static func known(_ status: JobStatus, _ id: JobID) throws -> JobStatus {
            guard status == .unknown else { return status }
            throw SkyError.jobNotFound(id)
        }

        /// `status` after a cancel, unless the job had ended another way before it (succeeded
        /// or failed): then a failure (exit 1) naming the state, because the command did not do
        /// what it was asked and a script must not read that as a cancel. A job cancelled
        /// before is left cancelled, which is what was asked.
        static func cancelled(_ status: JobStatus, _ id: JobID) throws -> JobStatus {
            // A failure's description ends with its message's own full stop.
            let described = "\(status)"
            let state = described.hasSuffix(".") ? String(described.dropLast()) : described
            switch status {
            case .succeeded:
                throw CommandFailure(
                    "job \(id) had already ended: \(state). A job that ended keeps its outcome; there is nothing to cancel"
                )
            case .failed:
                throw CommandFailure(
                    "job \(id) had already ended: \(state). A job that ended keeps its outcome; to run it again, use skyctl jobs retry \(id)"
                )
            default:
                return status
            }
        }

        /// Prints what `body` answers for the job; a failure is one line and exit 1.
        func run(_ body: @escaping (SkyClient, JobID) async throws -> String) async throws {
            let id = try jobID(id)
            await options.run("skyctl") { client in print(try await body(client, id)) }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Shows where one job stands.")

        @OptionGroup var job: JobArguments

        @Flag(help: "Also print the result of a job that succeeded (the handler's JSON), on a line of its own.")
        var result = false

        func run() async throws {
            let withResult = result
            try await job.run { client, id in
                let status = try JobArguments.known(try await client.status(of: id), id)
                var lines = ["\(id)  \(status)"]
                // The first line as any broker answers it; the rest from one that describes jobs.
                if await client.brokerTakes(\.describesJobs) {
                    let details = try await client.details(of: id)
                    lines += JobDetailLines.lines(details)
                    if case .queued = status, let service = details.service,
                        let note = await Self.whyWaiting(service, client)
                    {
                        lines.append(note)
                    }
                }
                // What a handler or a worker wrote (an error's type and message) may hold control
                // characters; printed raw they would drive the terminal.
                lines = lines.map(Self.printable)
                if withResult, case .succeeded = status {
                    // It ended: the wait answers at once, with the outcome as it was recorded
                    // (the handler's JSON, printed as it is).
                    let body = try await client.result(of: id, as: RawResult.self, coder: RawResult.Coder()).bytes
                    lines.append(String(decoding: body, as: UTF8.self))
                } else if withResult {
                    lines.append("(no result: the job has not succeeded)")
                }
                return lines.joined(separator: "\n")
            }
        }

        /// Why a queued job of `service` waits, when it is not only its turn: the service is
        /// paused, or no worker serves it (a typo in its name waits silently for ever).
        static func whyWaiting(_ service: String, _ client: SkyClient) async -> String? {
            guard let services = try? await client.services() else { return nil }
            let state = services.first { $0.name == service }
            if state?.paused == true {
                return
                    "note: \(service) is paused; its jobs wait until it is resumed (skyctl services resume \(service))"
            }
            guard (state?.workers ?? 0) == 0 else { return nil }
            return
                "note: no worker serves \(service) now; the job waits until one registers. Check the name (skyctl services list)"
        }

        /// `text` with its control characters made spaces (as the broker makes a handler's
        /// progress and log lines).
        static func printable(_ text: String) -> String {
            ProgressReport.fitted(text, limit: Int.max)
        }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Cancels a job that has not ended (a running handler is cancelled); exits 1 if it had ended otherwise.")

        @OptionGroup var job: JobArguments

        func run() async throws {
            try await job.run { client, id in
                "\(id)  \(try JobArguments.cancelled(try JobArguments.known(try await client.cancel(job: id), id), id))"
            }
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Runs a failed or cancelled job again, as a new job; prints the new job's id.")

        @OptionGroup var job: JobArguments

        func run() async throws {
            try await job.run { client, id in "\(try await client.retry(job: id))" }
        }
    }
}
