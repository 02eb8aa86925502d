import ArgumentParser
import Foundation
import Sky
import SkyCLISupport
import SkyProtocol

struct SchedulesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedules",
        abstract: "Lists, shows, adds, pauses, resumes, removes and triggers schedules (docs/jobs.md, \"Schedules\").",
        subcommands: [List.self, Show.self, Add.self, Pause.self, Resume.self, Remove.self, Trigger.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Lists the schedules, by name, with their next tick.")

        @OptionGroup var options: BrokerOptions

        func run() async throws {
            await options.run("skyctl") { client in
                let items = try await client.schedules()
                if items.isEmpty {
                    print("no schedules")
                    return
                }
                let rows = items.map { item in
                    [
                        item.spec.name, "\(item.spec.timing)", item.spec.paused ? "paused" : "active",
                        ScheduleText.time(item.nextFire), item.spec.job.service,
                        item.lastJob.map { "\($0)" } ?? "-",
                    ]
                }
                ScheduleText.table(["NAME", "TIMING", "STATE", "NEXT TICK (UTC)", "SERVICE", "LAST JOB"], rows)
            }
        }
    }

    /// The schedule name a command takes, and the broker it asks.
    struct NameArguments: ParsableArguments {
        @Argument(help: "The schedule's name (1 to 255 bytes).")
        var name: String

        @OptionGroup var options: BrokerOptions

        func validate() throws {
            if let problem = WireFormat.nameProblem(name, what: "schedule name") { throw ValidationError(problem) }
        }

        /// Prints what `body` answers about the schedule; a failure is one line and exit 1.
        func run(_ body: @escaping (SkyClient, String) async throws -> String) async {
            let name = name
            await options.run("skyctl") { client in
                do {
                    print(try await body(client, name))
                } catch SkyError.invalidTask(let message) {
                    throw ScheduleText.refusal(message)
                }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Shows one schedule: its timing, policies, job and the state of its last job.")

        @OptionGroup var schedule: NameArguments

        func run() async throws {
            let name = schedule.name
            await schedule.options.run("skyctl") { client in
                guard let item = try await client.schedules().first(where: { $0.spec.name == name }) else {
                    throw CommandFailure(
                        "no schedule named \(String(reflecting: name)); skyctl schedules list names them")
                }
                var lines = ScheduleText.details(item)
                if let last = item.lastJob {
                    lines.append(("last job state", "\(try await client.status(of: last))"))
                }
                let width = lines.map(\.0.count).max() ?? 0
                for (label, value) in lines {
                    print(label + ":" + String(repeating: " ", count: width - label.count + 2) + value)
                }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Adds a schedule, or replaces the one of that name; prints its next tick (or that it is paused).",
            discussion: """
                Each tick submits a durable job of --service with --body as its task (the JSON a
                worker's handler decodes). With the same timing, a replaced schedule keeps its
                next tick. Examples:
                  skyctl schedules add report --every 3600 --service reports.daily --body '{"kind":"hourly"}'
                  skyctl schedules add nightly --cron '30 2 * * MON-FRI' --time-zone Europe/Berlin --service sky.scan --body '{"sector":8}'
                """)

        @OptionGroup var schedule: NameArguments

        @Option(
            parsing: .unconditional,
            help: "Fire every this many seconds (1 to 31622400), at its multiples since 1970 (UTC).")
        var every: Double?

        @Option(help: "Fire at the times this cron expression names: five fields, or @hourly and the like.")
        var cron: String?

        @Option(help: "With --cron: the expression's time zone, an IANA name (Europe/Berlin; UTC by default).")
        var timeZone: String?

        @Option(help: "The service each tick's job runs on.")
        var service: String

        @Option(help: "The task each tick's job carries, as the handler's JSON (default: {}).")
        var body: String?

        @Option(help: "Read the task's JSON from this file instead.")
        var bodyFile: String?

        @Option(help: "When the previous job has not ended: skip, allow, cancel-previous or queue.")
        var overlap = "skip"

        @Option(
            help: "Ticks missed while no broker ran: none, last, or all (with --catch-up-limit, and --overlap allow).")
        var catchUp = "last"

        @Option(
            parsing: .unconditional,
            help: "With --catch-up all: the most missed ticks that fire (1 to 1000; 10 by default).")
        var catchUpLimit: Int?

        @OptionGroup var job: JobFlags

        @Flag(help: "Add it paused: it fires nothing until resumed.")
        var paused = false

        func validate() throws {
            switch (every, cron) {
            case (nil, nil): throw ValidationError("give --every SECONDS or --cron EXPRESSION")
            case (.some, .some): throw ValidationError("give --every or --cron, not both")
            default: break
            }
            if let every {
                try FlagCheck.seconds(every, "--every", in: 1...31_622_400)
                guard (every * 1000).rounded() == every * 1000 else {
                    throw ValidationError("--every \(every) is not a whole number of milliseconds")
                }
                if timeZone != nil {
                    throw ValidationError(
                        "--time-zone applies to --cron; --every counts from 1970 in UTC, whatever the zone")
                }
            }
            if let cron {
                do {
                    _ = try CronExpression(cron)
                } catch {
                    throw ValidationError("--cron \(String(reflecting: cron)): \(error)")
                }
                do {
                    _ = try TimeZone.named(timeZone ?? "UTC")
                } catch {
                    throw ValidationError("--time-zone: \(error)")
                }
            }
            if let problem = WireFormat.nameProblem(service, what: "--service") { throw ValidationError(problem) }
            if service.hasPrefix(BrokerService.prefix) {
                throw ValidationError("--service \(service): \(BrokerService.prefix)* services are the broker's own")
            }
            if body != nil, bodyFile != nil { throw ValidationError("give --body or --body-file, not both") }
            if let body { try TaskBody.check(Array(body.utf8), "--body") }
            guard ScheduleSpec.Overlap(name: overlap) != nil else {
                throw ValidationError("--overlap \(overlap): use skip, allow, cancel-previous or queue")
            }
            guard ["none", "last", "all"].contains(catchUp) else {
                throw ValidationError("--catch-up \(catchUp): use none, last or all")
            }
            if let catchUpLimit {
                guard catchUp == "all" else { throw ValidationError("--catch-up-limit applies to --catch-up all") }
                try FlagCheck.integer(catchUpLimit, "--catch-up-limit", in: 1...ScheduleSpec.maxCatchUp)
            }
            if catchUp == "all", overlap != "allow" {
                throw ValidationError(
                    "--catch-up all fires every missed tick at once, which only --overlap allow lets run; with --overlap \(overlap) use --catch-up last"
                )
            }
        }

        func run() async throws {
            let text: String
            if let bodyFile {
                guard let data = FileManager.default.contents(atPath: bodyFile) else {
                    ProcessSetup.fail("skyctl", "cannot read --body-file \(bodyFile); is the path right?")
                }
                do {
                    try TaskBody.check(Array(data), "--body-file \(bodyFile)")
                } catch {
                    ProcessSetup.fail("skyctl", "\(error)")
                }
                text = String(decoding: data, as: UTF8.self)
            } else {
                text = body ?? "{}"
            }
            let timing: ScheduleSpec.Timing
            if let cron, let expression = try? CronExpression(cron) {
                timing = .cron(expression, timeZone: timeZone ?? "UTC")
            } else {
                timing = .every(milliseconds: UInt64(((every ?? 0) * 1000).rounded()))
            }
            let options = job.options()
            let catchUp: ScheduleSpec.CatchUp =
                switch self.catchUp {
                case "none": .none
                case "all": .all(limit: catchUpLimit ?? 10)
                default: .last
                }
            let overlap = ScheduleSpec.Overlap(name: self.overlap) ?? .skip
            let paused = paused
            let service = service
            await schedule.run { client, name in
                let next = try await client.schedule(
                    name: name, timing: timing, service: service, body: Array(text.utf8), options: options,
                    overlap: overlap, catchUp: catchUp, paused: paused)
                return paused ? "\(name)  paused" : "\(name)  next tick \(SkyEvent.timestamp(next))"
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Pauses a schedule: it fires nothing until resumed.")

        @OptionGroup var schedule: NameArguments

        func run() async throws {
            await schedule.run { client, name in
                try await client.pauseSchedule(name)
                return "\(name)  paused"
            }
        }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Resumes a paused schedule from now on (ticks missed while paused do not fire).")

        @OptionGroup var schedule: NameArguments

        func run() async throws {
            await schedule.run { client, name in
                "\(name)  next tick \(SkyEvent.timestamp(try await client.resumeSchedule(name)))"
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Removes a schedule; the jobs it made are left as they are.")

        @OptionGroup var schedule: NameArguments

        func run() async throws {
            await schedule.run { client, name in
                try await client.removeSchedule(name)
                return "\(name)  removed"
            }
        }
    }

    struct Trigger: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Submits the schedule's job now, outside its ticks; prints the job's id.")

        @OptionGroup var schedule: NameArguments

        func run() async throws {
            await schedule.run { client, name in "\(try await client.triggerSchedule(name))" }
        }
    }
}

/// How skyctl writes schedules for people.
enum ScheduleText {
    /// The broker's refusal as an operator reads it: without the service it was asked through,
    /// and for a name it does not know, where the names are.
    static func refusal(_ message: String) -> CommandFailure {
        var text = message
        if text.hasPrefix(BrokerService.prefix), let colon = text.range(of: ": ") {
            text = String(text[colon.upperBound...])
        }
        if text.hasPrefix("no schedule named") { text += "; skyctl schedules list names them" }
        return CommandFailure(text)
    }

    static func time(_ milliseconds: Int64) -> String {
        SkyEvent.timestamp(Date(timeIntervalSince1970: TimeInterval(milliseconds) / 1000))
    }

    static func details(_ item: ScheduleListing.Item) -> [(String, String)] {
        let spec = item.spec
        let job = spec.job
        let catchUp: String
        switch spec.catchUp {
        case .none: catchUp = "none"
        case .last: catchUp = "last"
        case .all(let limit): catchUp = "all (at most \(limit))"
        }
        var lines: [(String, String)] = [
            ("name", spec.name), ("timing", "\(spec.timing)"), ("state", spec.paused ? "paused" : "active"),
            ("next tick", time(item.nextFire)), ("overlap", spec.overlap.name), ("catch-up", catchUp),
            ("service", job.service), ("body", String(decoding: job.body, as: UTF8.self)),
            ("priority", "\(job.priority)"),
            ("timeout", job.timeoutMilliseconds == 0 ? "none" : "\(Double(job.timeoutMilliseconds) / 1000) s"),
            ("max attempts", "\(job.maxAttempts)"), ("retention", "\(job.retentionMilliseconds / 1000) s"),
        ]
        if let key = job.concurrencyKey {
            let limit = job.concurrencyLimit
            lines.append(("key", limit > 0 ? "\(key) (at most \(limit) at once)" : key))
        }
        lines.append(("last job", item.lastJob.map { "\($0)" } ?? "none yet"))
        return lines
    }

    /// Prints `rows` in columns under `header`.
    static func table(_ header: [String], _ rows: [[String]]) {
        let widths = header.indices.map { column in
            ([header] + rows).map { $0[column].count }.max() ?? 0
        }
        for row in [header] + rows {
            let cells = row.enumerated().map { column, text in
                column == row.count - 1 ? text : text + String(repeating: " ", count: widths[column] - text.count)
            }
            print(cells.joined(separator: "  "))
        }
    }
}
